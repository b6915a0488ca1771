#!/bin/bash
# The user data of a runner instance. Cloud-init saves it to a file and runs that file once,
# on the instance's first boot. lib/user-data.ts renders it: @@START_RUNNER@@ becomes the
# start logic of templates/start-runner.sh, from its begin marker line to its end marker
# line, and comment lines starting with a single "#" are dropped (lines starting with "##"
# stay, as notes for whoever reads the user data on an instance).
#
# Custom user data (docs/boot-modes.md) must keep the block verbatim, marker lines included,
# run as a file (not piped into bash: PRIME copies the block out of "$0"), and put its own
# steps before the block: the block ends with "exit".
## PRIME copies the lines between the markers into the boot hook.
@@START_RUNNER@@
