"""Optional integrations with third-party clients; each imports its library lazily."""

__all__: list[str] = []
