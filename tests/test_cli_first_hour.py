"""The command line for a first hour: every locked document, a filter matching several,
an embedded server to try it on, and a doctor that says what a single node is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from pymongo import MongoClient
from pymongo.collection import Collection

from docmultilock import WriteLock
from docmultilock.pytest_plugin import CLIENT_OPTIONS
from docmultilock.testing import URI_VARIABLE
from tests.helpers import Doc
from tests.test_cli_ops import cli, where


def test_inspect_all_lists_every_locked_document_and_only_those(
    uri: str, collection: Collection[Doc]
) -> None:
    collection.insert_many([{"_id": i} for i in range(4)])
    locks = WriteLock(collection)
    held = {i: locks.acquire({"_id": i}).id for i in (2, 0)}
    released = locks.acquire({"_id": 3})
    locks.release({"_id": 3}, released)

    done = cli("inspect", *where(uri, collection), "--all", "--json")

    assert done.returncode == 0, done.stderr
    listed = [json.loads(line) for line in done.stdout.splitlines()]
    assert [doc["document_id"] for doc in listed] == [{"$numberInt": "0"}, {"$numberInt": "2"}]
    assert [doc["holders"][0]["id"] for doc in listed] == [held[0], held[2]]


def test_inspect_all_counts_and_skips_a_field_it_does_not_own(
    uri: str, collection: Collection[Doc]
) -> None:
    collection.insert_many([{"_id": 1}, {"_id": 2, "lock": {"v": 9, "holders": [1]}}])
    WriteLock(collection).acquire({"_id": 1})

    done = cli("inspect", *where(uri, collection), "--all")

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"1 locked document in {collection.full_name}"
    assert "skipped: field 'lock' of document 2" in done.stderr


def test_inspect_all_needs_a_collection(uri: str) -> None:
    done = cli("inspect", "--uri", uri, "--db", "docmultilock_test", "--all")
    assert done.returncode == 2
    assert "--all needs --collection" in done.stderr


def test_inspect_says_how_many_documents_a_filter_matches(
    uri: str, collection: Collection[Doc]
) -> None:
    collection.insert_many([{"_id": i, "kind": "x"} for i in range(3)])

    done = cli("inspect", *where(uri, collection), "--filter", '{"kind": "x"}')

    assert done.returncode == 0, done.stderr
    assert "--filter matches 3 documents; this is the first" in done.stderr
    assert done.stdout.startswith(f"{collection.full_name} document 0:")


def test_inspect_of_one_matching_document_adds_no_note(
    uri: str, collection: Collection[Doc]
) -> None:
    collection.insert_one({"_id": 1})
    done = cli("inspect", *where(uri, collection), "--filter", '{"_id": 1}')
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_doctor_says_what_a_one_node_replica_set_and_the_embedded_server_are(
    uri: str, client: MongoClient[Doc], collection: Collection[Doc], is_embedded: bool
) -> None:
    done = cli("doctor", "--uri", uri, "--db", collection.database.name, "--json")
    checks = {check["check"]: check["detail"] for check in json.loads(done.stdout)}
    hello = client.admin.command("hello")
    if hello.get("setName") and len(hello.get("hosts", [])) == 1:
        assert "one-node replica set" in checks["topology"]
        assert "no fail-over" in checks["topology"]
        assert "nothing to fail over to" in checks["w:majority"]
    assert ("embedded test server" in checks["version"]) is is_embedded


def test_server_prints_its_uri_and_stops_on_ctrl_c() -> None:
    env = {key: value for key, value in os.environ.items() if key != URI_VARIABLE}
    server = subprocess.Popen(
        [sys.executable, "-m", "docmultilock", "server"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        uri = server.stdout.readline().strip()
        assert uri.startswith("mongodb://127.0.0.1:")
        served: MongoClient[Doc] = MongoClient(uri, **CLIENT_OPTIONS)
        try:
            assert served.admin.command("ping")["ok"] == 1
        finally:
            served.close()
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if server.stdout is not None:
            server.stdout.close()
