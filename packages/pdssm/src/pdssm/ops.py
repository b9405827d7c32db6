"""Public ops of pdssm: argument checks, autograd functions and backend dispatch."""
