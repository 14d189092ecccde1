import sys

try:
    from solbench.cli import console_main
except KeyboardInterrupt:  # Ctrl-C while Python was still importing the command line
    print("interrupted", file=sys.stderr)
    sys.exit(130)

console_main()
