#!/usr/bin/env python3
# A TCP stream for bench/hosts_scaling.sh's link measurement: "serve PORT" accepts one
# connection and reads it to its end; "send HOST PORT SECONDS" connects (retrying for 10 s while
# the server starts) and sends for SECONDS. The bench reads eth0's counters around it.
#
#   bench/lib/link_probe.py serve PORT
#   bench/lib/link_probe.py send HOST PORT SECONDS
import socket, sys, time

CHUNK = b"\0" * (1 << 20)

if sys.argv[1] == "serve":
    with socket.create_server(("", int(sys.argv[2]))) as server:
        connection, _ = server.accept()
        with connection:
            while connection.recv(1 << 20):
                pass
elif sys.argv[1] == "send":
    host, port, seconds = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    give_up = time.monotonic() + 10
    while True:
        try:
            stream = socket.create_connection((host, port), timeout=10)
            break
        except OSError:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.1)
    with stream:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            stream.sendall(CHUNK)
else:
    sys.exit(f"usage: {sys.argv[0]} serve PORT | send HOST PORT SECONDS")
