"""The users file and its hashes, and the session table."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from jobgate.console.passwords import Cost, PasswordHash, Users, UsersFileError, hash_password
from jobgate.console.sessions import Sessions

CHEAP = Cost(log2_n=4)


def test_a_hash_matches_its_password_only() -> None:
    encoded = hash_password("s3cret", CHEAP)
    assert encoded.startswith("scrypt$4$8$1$")
    parsed = PasswordHash.parse(encoded)
    assert parsed.matches("s3cret")
    assert not parsed.matches("s3cret ")


def test_two_hashes_of_one_password_differ_by_their_salt() -> None:
    assert hash_password("same", CHEAP) != hash_password("same", CHEAP)


def test_the_default_cost_is_scrypt_n_2_15() -> None:
    assert PasswordHash.parse(hash_password("x")).cost == Cost(15, 8, 1)


def test_a_users_file_is_read_with_comments(tmp_path: Path) -> None:
    path = tmp_path / "users"
    path.write_text(f"# operators\nada:{hash_password('pw', CHEAP)}  # on call\n\n")
    users = Users.load(str(path))
    assert len(users) == 1
    assert users.check("ada", "pw")
    assert not users.check("ada", "wrong")
    assert not users.check("bob", "pw")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "names no user"),
        ("ada\n", "expected NAME:HASH"),
        ("ada:plain-password\n", "expected scrypt$"),
        ("ada:scrypt$99$8$1$c2FsdA$a2V5\n", "cost out of range"),
        ("ada:scrypt$4$8$1$c2FsdA$a2V5\n", "key 32 bytes"),
    ],
)
def test_a_malformed_users_file_is_refused_naming_the_line(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "users"
    path.write_text(text)
    with pytest.raises(UsersFileError, match=said.replace("$", r"\$")):
        Users.load(str(path))


def test_a_user_named_twice_is_refused(tmp_path: Path) -> None:
    line = f"ada:{hash_password('pw', CHEAP)}\n"
    (tmp_path / "users").write_text(line + line)
    with pytest.raises(UsersFileError, match="appears twice"):
        Users.load(str(tmp_path / "users"))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_expires_after_its_ttl() -> None:
    clock = Clock()
    sessions = Sessions(timedelta(seconds=60), clock)
    session = sessions.new()
    clock.now += 59
    assert sessions.get(session.id) == session
    clock.now += 1
    assert sessions.get(session.id) is None


def test_sign_in_replaces_the_session() -> None:
    sessions = Sessions(timedelta(hours=1))
    anonymous = sessions.new()
    signed = sessions.sign_in(anonymous, "ada")
    assert signed.id != anonymous.id and signed.csrf != anonymous.csrf
    assert sessions.get(anonymous.id) is None
    assert sessions.get(signed.id) == signed


def test_the_session_table_drops_the_oldest_past_its_cap() -> None:
    sessions = Sessions(timedelta(hours=1), max_sessions=2)
    first, second, third = sessions.new(), sessions.new(), sessions.new()
    assert sessions.get(first.id) is None
    assert sessions.get(second.id) == second and sessions.get(third.id) == third
