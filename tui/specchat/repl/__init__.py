"""``specchat repl``: a line-based chat on prompt-toolkit for plain terminals, SSH, logged tmux panes, screen readers and
pipes, sharing the backend, profiles, chat session, store and telemetry with the full-screen app."""
