"""Public ops of jetnemotron: argument checks, autograd functions and backend dispatch."""
