"""Public ops of dizo: argument checks, autograd functions and backend dispatch."""
