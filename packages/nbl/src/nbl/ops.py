"""Public ops of nbl: argument checks, autograd functions and backend dispatch."""
