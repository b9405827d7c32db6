"""Public ops of cads: argument checks, autograd functions and backend dispatch."""
