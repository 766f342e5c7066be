"""MongoDB stand-ins: for the store's logic, mongomock (with
:func:`patch_mongomock`); for the wire, a mockupdb server that keeps upserted
documents by collection and misbehaves on the first update commands it is
told to (``hangup``, ``stepdown``, ``unauthorized``, ``dupkey``)."""

from __future__ import annotations

import threading
from typing import Any

from mockupdb import MockupDB

HELLO = {"minWireVersion": 0, "maxWireVersion": 21, "isWritablePrimary": True}


class FakeMongo:
    """A mockupdb server that keeps upserted documents by collection and
    misbehaves on the first ``faults`` update commands."""

    def __init__(self, faults: list[str]) -> None:
        self.faults = list(faults)
        self.docs: dict[str, dict[str, Any]] = {
            "pages_metadata": {},
            "pages_content": {},
            "pages_simhash": {},
            "spilled_requests": {},
        }
        self.updates = 0
        self.lock = threading.Lock()
        self.server = MockupDB(auto_ismaster=HELLO)
        self.server.autoresponds(self.dispatch)

    def dispatch(self, request: Any) -> bool:
        name = request.command_name
        if name.lower() in {"ismaster", "hello"}:
            request.replies(HELLO)
        elif name == "update":
            return self.on_update(request)
        elif name == "delete":
            request.replies(ok=1, n=0)
        elif name == "find":
            self.on_find(request)
        else:  # createIndexes, endSessions...
            request.ok()
        return True

    def on_find(self, request: Any) -> None:
        """The stored documents whose ``_id`` is ``$in`` the filter (what a
        write reads first: the stored hashes and visit histories), in one
        batch."""
        coll = request.doc["find"]
        wanted = request.doc.get("filter", {}).get("_id", {}).get("$in")
        with self.lock:
            docs = [
                {"_id": i, **d}
                for i, d in self.docs.get(coll, {}).items()
                if wanted is None or i in wanted
            ]
        request.replies(cursor={"id": 0, "ns": f"db.{coll}", "firstBatch": docs})

    def on_update(self, request: Any) -> bool:
        with self.lock:
            self.updates += 1
            fault = self.faults.pop(0) if self.faults else "ok"
        coll = request.doc["update"]
        ops = request.docs[1:] if len(request.docs) > 1 else request.doc["updates"]
        if fault == "hangup":
            request.hangup()
            return True
        if fault == "stepdown":
            request.replies(ok=0, code=10107, errmsg="not writable primary")
            return True
        if fault == "unauthorized":
            request.replies(ok=0, code=13, errmsg="not authorized on db")
            return True
        errors = []
        for i, op in enumerate(ops):
            doc_id = op["q"]["_id"]
            if fault == "dupkey" and i == 1 and coll == "pages_metadata":
                errors.append({"index": i, "code": 11000, "errmsg": "E11000 url"})
                continue
            self.docs[coll][doc_id] = op["u"]
        reply: dict[str, Any] = {"ok": 1, "n": len(ops) - len(errors), "nModified": 0}
        if errors:
            reply["writeErrors"] = errors
        request.replies(reply)
        return True


def patch_mongomock() -> None:
    """mongomock 4.3 predates pymongo 4.9's ``sort`` argument of
    ``ReplaceOne`` and ``UpdateOne``, which pymongo passes through (as None)
    to the bulk builder: accept and ignore it, as the server does without a
    sort."""
    from mongomock.collection import BulkOperationBuilder

    for name in ("add_replace", "add_update"):
        original = getattr(BulkOperationBuilder, name)
        if getattr(original, "_webcrawl_patched", False):
            continue

        def accept_sort(
            self: Any,
            *args: Any,
            _original: Any = original,
            sort: Any = None,
            **kw: Any,
        ) -> Any:
            return _original(self, *args, **kw)

        accept_sort._webcrawl_patched = True  # type: ignore[attr-defined]
        setattr(BulkOperationBuilder, name, accept_sort)
