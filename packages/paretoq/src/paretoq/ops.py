"""Public ops of paretoq: argument checks, autograd functions and backend dispatch."""
