"""Public ops of seal: argument checks, autograd functions and backend dispatch."""
