"""Public ops of lope: argument checks, autograd functions and backend dispatch."""
