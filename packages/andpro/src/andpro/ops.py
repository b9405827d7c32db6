"""Public ops of andpro: argument checks, autograd functions and backend dispatch."""
