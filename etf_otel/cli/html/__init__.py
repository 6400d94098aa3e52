"""The ``--html`` views of ``replay`` and ``audit``: self-contained pages, nothing fetched."""
