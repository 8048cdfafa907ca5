"""The Textual chat app: a view of the engine's events, never a second source of truth."""
