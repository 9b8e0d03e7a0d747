#!/usr/bin/env python
"""Django's command-line utility for archiver."""

from archiver.cli import main

if __name__ == "__main__":
    main()
