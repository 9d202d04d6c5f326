# A terminal in the course's JupyterLab (`make lab`): the user's own start-up file first, then the
# course's virtual environment (VIRTUAL_ENV, set by `make lab`) first on PATH, as `activate` does.
if [ -f ~/.bashrc ]; then
    . ~/.bashrc
fi
if [ -n "$VIRTUAL_ENV" ] && [ -d "$VIRTUAL_ENV/bin" ]; then
    PATH="$VIRTUAL_ENV/bin:$PATH"
    export PATH VIRTUAL_ENV
fi
