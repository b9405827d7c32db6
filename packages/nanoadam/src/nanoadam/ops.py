"""Public ops of nanoadam: argument checks, autograd functions and backend dispatch."""
