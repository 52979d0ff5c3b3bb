#!/bin/sh
# STAND-IN agent for bench/engine.py, not a real agent: a turn that takes one second and does nothing
# else (called as `<agent> --prompt-file P --trace T --json`; leaves the case's fixture trajectory at T).
sleep 1
cp trajectory.json "$4"
