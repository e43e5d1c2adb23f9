"""Sends a worker's connections to one address through a test's relay instead.

Imported by the worker scripts of the relay tests (wire_worker.py,
service_worker.py): the cluster and the rendezvous stay as they are, and every
byte to that address crosses the relay, which may tamper with it.
"""

import socket

from tfx_dist.comm import rendezvous


def redirect_to_relay(server_address: str, relay_port: int) -> None:
    host, port = server_address.rsplit(":", 1)
    real = socket.create_connection

    def create_connection(address, *args, **kwargs):
        if address == (host, int(port)):
            address = ("127.0.0.1", relay_port)
        return real(address, *args, **kwargs)

    rendezvous.socket.create_connection = create_connection
