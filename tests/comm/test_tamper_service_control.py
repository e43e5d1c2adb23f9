"""Integrity of the control connection and of the request/response service
(parameter server) connections against a relay on the network path.

The relay of test_wire_protection.py passes each authenticated handshake
through untouched (it never learns the job secret), then changes, drops or
replays one frame of the wire protection on the connection under attack:

- control connection (rank 1 to rank 0, the negotiation): both ranks fail
  naming the peer, no rank returns a sum;
- service connection (a client's 1 MiB PUSHes to a server, or the server's
  replies): the side that receives the frame fails naming the peer, the
  other side fails too (the connection is dropped), and the server's table
  holds only the pushes that arrived intact before the attack.
"""

import json

import pytest

from comm_procs import free_addresses
from test_service import Proc
from test_wire_protection import Relay, both_ranks_fail_naming_the_peer, run_through_relay

CONTROL_CHANNEL, SERVICE_CHANNEL = 2, 3


@pytest.mark.reliability
@pytest.mark.parametrize("attack,protection", [("flip_frame", "integrity"), ("replay", "encrypt")])
def test_tampering_with_the_control_connection_names_the_peer(attack, protection, reliability):
    # Frame 1 from rank 1: its READY for the second all-reduce.
    victim, detected = both_ranks_fail_naming_the_peer(
        attack, *run_through_relay(attack, protection, channel=CONTROL_CHANNEL, target=1))
    assert "control connection from rank 1" in victim and "integrity check" in victim, victim
    verb = {"flip_frame": "flips a bit in", "replay": "replays", "drop": "drops"}[attack]
    reliability(f"attack: a relay {verb} a frame of the control connection "
                f"(rank 1 to rank 0; TFX_WIRE_PROTECTION={protection})",
                f"both ranks fail naming the peer; rank 0: {victim[:110]}",
                round(max(detected, 0.0), 3), "the collective (no wrong result)")


def run_service_through_relay(attack, protection, direction="to_server", target=3):
    """One server, one client doing 3 pushes of 1 MiB then reading the table, through a Relay."""
    addresses = free_addresses(1)
    relay = Relay(addresses[0], attack, channel=SERVICE_CHANNEL, target=target, direction=direction)
    env = {"TFX_SHM": "0", "TFX_TIMEOUT_S": "20", "TFX_WIRE_PROTECTION": protection,
           "TFX_TEST_RELAY_PORT": str(relay.port)}
    try:
        srv = Proc("server", 0, addresses, 1, "xor", env)
        cli = Proc("client", 0, addresses, 1, "pushes", env)
        c, s = cli.finish(), srv.finish()
    finally:
        relay.close()
    table = json.loads(next(line for line in s.out.splitlines() if line.startswith("TABLE "))[6:])
    return c, s, table, relay.attacked_at


def _error_time(proc) -> tuple[str, float]:
    line = next(line for line in proc.out.splitlines() if line.startswith("ERROR "))
    message, _, when = line.rpartition(" AT ")
    return message, float(when)


def test_a_relay_that_only_passes_service_bytes_changes_nothing():
    c, s, table, _ = run_service_through_relay("pass", "integrity")
    assert c.p.returncode == 0 and s.p.returncode == 0, c.out + c.err[-2000:] + s.out + s.err[-2000:]
    want = {"pushes": 3, "sum": (1 + 2 + 3) * (1 << 20)}
    assert c.result()["table"] == want and table == want


@pytest.mark.reliability
@pytest.mark.parametrize("attack,protection,direction", [("flip_frame", "integrity", "to_server"),
                                                         ("drop", "integrity", "to_server"),
                                                         ("replay", "encrypt", "to_server"),
                                                         ("flip_frame", "integrity", "to_client")])
def test_tampering_with_a_service_connection_names_the_peer(attack, protection, direction, reliability):
    # to_server: frame 3 is inside the first 1 MiB push (9 frames of 128 KiB);
    # to_client: frame 3 is the reply to the GET (after three empty PUSH replies).
    c, s, table, attacked_at = run_service_through_relay(attack, protection, direction)
    assert attacked_at is not None, "the relay never attacked"
    assert c.p.returncode == 3 and s.p.returncode == 3, c.out + c.err[-2000:] + s.out + s.err[-2000:]
    client_error, client_at = _error_time(c)
    assert "server 0 (ps 0)" in client_error, client_error
    server_error = s.error()
    assert "client 0 (worker 0)" in server_error, server_error
    if direction == "to_server":
        assert "integrity check" in server_error or "tampered" in server_error, server_error
        assert table == {"pushes": 0, "sum": 0}, f"the server applied a tampered push: {table}"
        victim, lost = server_error, "the push (the table is unchanged)"
    else:
        assert "integrity check" in client_error, client_error
        assert table == {"pushes": 3, "sum": 6 << 20}, table  # the pushes before were intact
        victim, lost = client_error, "the reply (no wrong value returned)"
    detected = client_at - attacked_at
    assert detected < 5, f"the client failed {detected:.1f} s after the attack"
    side = "a client's push" if direction == "to_server" else "a server's reply"
    verb = {"flip_frame": "flips a bit in", "replay": "replays", "drop": "drops"}[attack]
    reliability(f"attack: a relay {verb} a frame of {side} on a parameter-server "
                f"service connection (TFX_WIRE_PROTECTION={protection})",
                f"both sides fail naming the peer; {victim[:130]}", round(max(detected, 0.0), 3), lost)
