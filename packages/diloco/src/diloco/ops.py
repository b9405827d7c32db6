"""Public ops of diloco: argument checks, autograd functions and backend dispatch."""
