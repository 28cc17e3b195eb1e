"""``python -m sgl_speccompact.launch``."""

from .command_line import main
from .run import exit_process

if __name__ == "__main__":
    exit_process(main())  # the service has stopped: leave without the interpreter's teardown (run.exit_process)
