"""Public ops of ultradelta: argument checks, autograd functions and backend dispatch."""
