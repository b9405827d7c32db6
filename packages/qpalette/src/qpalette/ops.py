"""Public ops of qpalette: argument checks, autograd functions and backend dispatch."""
