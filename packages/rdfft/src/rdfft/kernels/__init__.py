"""Triton kernels (imported lazily by :mod:`rdfft.ops`; importing rdfft never imports triton)."""


def rdfft_rows_triton_(rows):
    """Forward rdFFT of every row of ``rows`` (R, N) with the Triton kernel, in place."""
    from rdfft.kernels.rdfft_triton import launch

    return launch(rows, inverse=False)


def irdfft_rows_triton_(rows):
    """Inverse rdFFT (1/N) of every row of ``rows`` (R, N) with the Triton kernel, in place."""
    from rdfft.kernels.rdfft_triton import launch

    return launch(rows, inverse=True)
