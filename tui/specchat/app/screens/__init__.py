"""Screens pushed over the chat: the modal dialogs, the chat list, a reply's replay."""
