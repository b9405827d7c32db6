"""Public ops of mambaspectrum: argument checks, autograd functions and backend dispatch."""
