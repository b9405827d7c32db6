"""Public ops of hybridprune: argument checks, autograd functions and backend dispatch."""
