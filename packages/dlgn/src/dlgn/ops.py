"""Public ops of dlgn: argument checks, autograd functions and backend dispatch."""
