"""The model loop: chat completions with `bash` and `python_exec` tools against one sandbox."""
