"""The ``--html`` views of ``replay`` and ``audit``: self-contained pages, nothing fetched."""

__all__: list[str] = []
