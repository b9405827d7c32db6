"""Public ops of rdfft: argument checks, autograd functions and backend dispatch."""
