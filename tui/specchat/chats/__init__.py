"""Conversations as the front ends show them: reply records built from engine events, the session that owns a chat,
its SQLite store, and export. UI-free: the Textual app and the line REPL share it."""
