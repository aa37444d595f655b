"""A small fake of the Hugging Face Hub HTTP API, on loopback, for publishing tests.

It answers the endpoints huggingface_hub 2.x calls when ccpo publishes (see
docs/contributing.md, "Tests"): whoami, repos/create, validate-yaml, preupload, commit,
branch, tag, refs, commit listing, model info (with visibility) and file resolve; and, for
`ccpo sync`, dataset repositories (create, info, tree, preupload, commit, resolve; see "Dataset
repositories" below), whose commits are serialised as the Hub does: a commit arriving while
another is being applied gets 409. Repositories are kept in memory as a linear history of
snapshots per branch, so a test can read back exactly what was committed, and every request is
recorded (method, path, query, headers, body) so a test can assert the sequence, the auth header
and the payloads. The real huggingface_hub client talks to it over HTTP: nothing is mocked.

It can also fail the way the real Hub does (`FakeHub.inject`, the fault table consulted at the
top of every request): an HTTP status (500, 429 with Retry-After, 409, 412), a commit whose
answer is lost after it landed, a silent endpoint, an endless answer and a trickling one. Every
fault is bounded in time and stops with the server.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

CONFLICT_MESSAGE = "A commit has happened since. Please refresh and try again."


def git_blob_id(content: bytes) -> str:
    """The id git (and the Hub's `blobId`) gives a file's content."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up (a retry after a 503 it did not read to the end, a cut answer) is
    what the real Hub sees all day: not an error of the server, so no traceback on stderr, where
    a CLI test would mistake it for one of ccpo's."""

    def handle_error(self, request, client_address):
        import sys

        if isinstance(
            sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
        ):
            return
        super().handle_error(request, client_address)


@dataclass
class Commit:
    oid: str
    message: str
    files: dict[str, bytes]  # the whole tree after this commit
    description: str = ""
    date: str = field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ"
        )
    )


@dataclass
class Repo:
    repo_id: str
    private: bool
    branches: dict[str, list[Commit]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)  # tag -> commit oid

    def head(self, revision: str) -> Commit | None:
        if revision in self.branches:
            return self.branches[revision][-1]
        if revision in self.tags:
            revision = self.tags[revision]
        for history in self.branches.values():
            for commit in history:
                if commit.oid == revision:
                    return commit
        return None


@dataclass
class Fault:
    """One injected failure: requests whose method and path match get `kind` instead of (or,
    for `lost`, after) the normal answer, `times` times.

    kinds: `status` (answer `status`, with `Retry-After` when given), `answer` (a 200 whose JSON
    body is `body`, e.g. a wrong-shaped one), `lost` (the commit is
    applied, then the answer is a 502, or with `status=None` the connection drops), `silent`
    (the connection stays open, unanswered, for `seconds`), `endless` (a 200 whose body never
    ends), `trickle` (a 200 whose body comes one byte every `interval` seconds; with
    `length=False` without a Content-Length), `delay` (the normal answer, after `seconds`), `raw`
    (an answer of `status` whose body is the bytes `raw`, as they are); `lost` with `silence`
    (the commit applied, then no answer for `seconds`)."""

    kind: str
    method: str | None = None
    path: str = ""
    times: int = 1
    status: int | None = 500
    retry_after: str | None = None
    seconds: float = 120.0
    interval: float = 0.5
    message: str = "Internal Error - We're working hard to fix this as soon as possible!"
    body: object = None
    length: bool = (
        True  # trickle: announce a Content-Length (False: the body ends when the connection does)
    )
    silence: bool = False  # lost: after the commit landed, the connection stays silent for `seconds`, then drops
    raw: bytes = b""  # raw: the bytes of the answer's body, as they are
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return (
            self.times > 0 and (self.method is None or self.method == method) and self.path in path
        )


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    @property
    def authorization(self) -> str | None:
        return self.headers.get("authorization")


class FakeHub:
    """Start with `with FakeHub() as hub:`; `hub.endpoint` is the base URL to pass to ccpo."""

    def __init__(self, user: str = "tester", token: str = "hf_fake_token_for_tests"):
        self.user = user
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.requests: list[RecordedRequest] = []
        # Test hooks: run once just before the next commit is applied (e.g. someone else edits
        # the repository), and files whose stored copy loses its last byte (a broken upload).
        self.before_next_commit = None
        self.truncate_paths: set[str] = set()
        self.corrupt_paths: set[str] = (
            set()
        )  # stored with one byte flipped (same size, other content)
        self.faults: list[Fault] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._commit_counter = 0
        # Dataset repositories (`ccpo sync`), kept apart from the model repositories above.
        self.datasets: dict[str, Repo] = {}
        # Seconds a dataset commit holds its repository: a commit arriving meanwhile gets 409.
        self.dataset_commit_seconds = 0.0
        # Statuses answered to the next dataset commits instead of applying them (e.g. [429, 503]).
        self.dataset_commit_failures: list[int] = []
        # The status of every dataset commit answered, in order.
        self.dataset_commit_answers: list[int] = []
        self._datasets_committing: set[str] = set()
        # A Hub that creates every repository public, whatever the client asked.
        self.create_public = False
        # Called with every request's number (from 1) as it arrives, before it is answered: a
        # test may kill the client there, and the request is still applied after it died.
        self.on_request = None
        self._server = _QuietServer(("127.0.0.1", 0), _make_handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # --- helpers for tests -------------------------------------------------------------

    def inject(
        self, kind: str, *, method: str | None = None, path: str = "", times: int = 1, **options
    ) -> Fault:
        """Fail the next `times` requests matching `method` and `path` (a fragment) with `kind`
        (see `Fault`). Faults are consulted in the order they were injected."""
        fault = Fault(kind, method=method, path=path, times=times, **options)
        with self._lock:
            self.faults.append(fault)
        return fault

    def take_fault(self, method: str, path: str, kinds: tuple[str, ...]) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.kind in kinds and fault.matches(method, path):
                    fault.times -= 1
                    fault.hits += 1
                    return fault
        return None

    def history(self, repo_id: str, branch: str = "main") -> list[Commit]:
        return list(self.repos[repo_id].branches[branch])

    def new_oid(self, seed: str) -> str:
        with self._lock:
            self._commit_counter += 1
            counter = self._commit_counter
        return hashlib.sha1(f"{seed}:{counter}".encode()).hexdigest()

    def seed_repo(
        self, repo_id: str, files: dict[str, bytes] | None = None, private: bool = False
    ) -> Repo:
        """A repository that already exists, with one commit holding `files`."""
        repo = Repo(repo_id=repo_id, private=private)
        tree = {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"}
        tree.update(files or {})
        repo.branches["main"] = [Commit(self.new_oid(repo_id), "initial commit", tree)]
        self.repos[repo_id] = repo
        return repo

    def push_external_commit(
        self, repo_id: str, files: dict[str, bytes], branch: str = "main"
    ) -> Commit:
        """Someone else edits the repository (e.g. on the website) between ccpo's read and write."""
        repo = self.repos[repo_id]
        tree = dict(repo.branches[branch][-1].files)
        tree.update(files)
        commit = Commit(self.new_oid(repo_id), "edit on the website", tree)
        repo.branches[branch].append(commit)
        return commit

    def commits_by_ccpo(self, repo_id: str) -> list[dict]:
        """The commit requests that reached the server, decoded."""
        found = []
        for request in self.requests:
            if request.method == "POST" and f"/api/models/{repo_id}/commit/" in request.path:
                found.append(decode_commit_payload(request.body))
        return found

    def requests_to(self, fragment: str, method: str | None = None) -> list[RecordedRequest]:
        return [
            r
            for r in self.requests
            if fragment in r.path and (method is None or r.method == method)
        ]


def decode_commit_payload(body: bytes) -> dict:
    """The NDJSON commit body as {"header": {...}, "files": {path: bytes}, "deleted": [...]}."""
    header: dict = {}
    files: dict[str, bytes] = {}
    deleted: list[str] = []
    for line in body.splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        key, value = item["key"], item["value"]
        if key == "header":
            header = value
        elif key == "file":
            encoding = value.get("encoding", "base64")
            content = value["content"]
            files[value["path"]] = (
                base64.b64decode(content) if encoding == "base64" else content.encode()
            )
        elif key in ("deletedFile", "deletedFolder"):
            deleted.append(value["path"])
        elif key == "lfsFile":
            raise AssertionError("the fake hub only accepts regular uploads")
    return {"header": header, "files": files, "deleted": deleted}


def _make_handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # keep test output quiet
            return

        # --- plumbing ----------------------------------------------------------------

        def _record(self) -> tuple[str, dict, bytes]:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            path = unquote(parts.path)
            query = parse_qs(parts.query)
            with hub._lock:
                hub.requests.append(RecordedRequest(self.command, path, query, headers, body))
                number = len(hub.requests)
            if hub.on_request is not None:
                hub.on_request(number, self.command, path)
            return path, query, body

        def _send(
            self, status: int, payload=None, headers: dict | None = None, raw: bytes | None = None
        ):
            data = (
                raw
                if raw is not None
                else (b"" if payload is None else json.dumps(payload).encode())
            )
            self.send_response(status)
            if raw is None:
                self.send_header("Content-Type", "application/json")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _error(self, status: int, message: str, code: str | None = None):
            headers = {"X-Error-Message": message}
            if code:
                headers["X-Error-Code"] = code
            self._send(status, {"error": message}, headers)

        def _authorized(self) -> bool:
            return self.headers.get("Authorization") == f"Bearer {hub.token}"

        # --- faults (consulted first by every verb) ----------------------------------

        def _fault(self, path: str) -> bool:
            """Answer with an injected fault, if one matches; True when it did."""
            fault = hub.take_fault(
                self.command,
                path,
                ("status", "answer", "silent", "endless", "trickle", "delay", "raw"),
            )
            if fault is None:
                return False
            if fault.kind == "delay":
                hub.stopping.wait(fault.seconds)
                return False  # then the normal answer
            if fault.kind == "raw":
                self._send(fault.status or 200, raw=fault.raw)
                return True
            if fault.kind == "answer":
                self._send(200, fault.body)
            elif fault.kind == "status":
                headers = {"X-Error-Message": fault.message}
                if fault.retry_after is not None:
                    headers["Retry-After"] = fault.retry_after
                self._send(fault.status, {"error": fault.message}, headers)
            elif fault.kind == "silent":
                hub.stopping.wait(fault.seconds)
                self.close_connection = True
            elif fault.kind == "endless":
                self._stream_forever(fault)
            else:
                self._trickle(fault)
            return True

        def _stream_forever(self, fault: Fault):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            block = b"[" + b'{"rfilename": "x"},' * 3000
            chunk = b"%x\r\n%s\r\n" % (len(block), block)
            ends = time.monotonic() + fault.seconds
            try:
                while time.monotonic() < ends and not hub.stopping.is_set():
                    self.wfile.write(chunk)
            except OSError:
                pass  # the client gave up: that is the point
            self.close_connection = True

        def _trickle(self, fault: Fault):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if fault.length:
                self.send_header("Content-Length", "100000")
            else:
                self.send_header("Connection", "close")
            self.end_headers()
            ends = time.monotonic() + fault.seconds
            try:
                while time.monotonic() < ends and not hub.stopping.wait(fault.interval):
                    self.wfile.write(b" ")
                    self.wfile.flush()
            except OSError:
                pass
            self.close_connection = True

        # --- verbs -------------------------------------------------------------------

        def do_GET(self):
            path, query, _ = self._record()
            if self._fault(path) or _dataset_get(self, hub, path, query):
                return
            self._route_get(path, query)

        def do_HEAD(self):
            path, query, _ = self._record()
            if self._fault(path) or _dataset_get(self, hub, path, query):
                return
            self._route_get(path, query)

        def do_POST(self):
            path, query, body = self._record()
            if self._fault(path) or _dataset_post(self, hub, path, query, body):
                return
            if path == "/api/validate-yaml":
                return self._validate_yaml(body)
            if not self._authorized():
                return self._error(401, "Invalid credentials in Authorization header")
            if path == "/api/repos/create":
                return self._create_repo(json.loads(body or b"{}"))
            parts = path.strip("/").split("/")
            # /api/models/<ns>/<name>/<action>/<rev...>
            if len(parts) >= 6 and parts[0] == "api" and parts[1] == "models":
                repo_id = f"{parts[2]}/{parts[3]}"
                action, revision = parts[4], "/".join(parts[5:])
                repo = hub.repos.get(repo_id)
                if repo is None:
                    return self._error(404, "Repository not found", "RepoNotFound")
                if action == "preupload":
                    return self._preupload(json.loads(body or b"{}"))
                if action == "commit":
                    return self._commit(repo, revision, body, query)
                if action == "branch":
                    return self._branch(repo, revision, json.loads(body or b"{}"))
                if action == "tag":
                    return self._tag(repo, revision, json.loads(body or b"{}"))
            self._error(404, f"no such endpoint: POST {path}")

        # --- GET routes --------------------------------------------------------------

        def _route_get(self, path: str, query: dict):
            if path == "/api/whoami-v2":
                if not self._authorized():
                    return self._error(401, "Invalid credentials in Authorization header")
                return self._send(
                    200,
                    {
                        "name": hub.user,
                        "type": "user",
                        "orgs": [],
                        "auth": {"accessToken": {"role": "write"}},
                    },
                )
            parts = path.strip("/").split("/")
            if (
                len(parts) >= 6
                and parts[0] == "api"
                and parts[1] == "models"
                and parts[4] == "tree"
            ):
                return self._tree(f"{parts[2]}/{parts[3]}", unquote(parts[5]), "/".join(parts[6:]))
            if (
                len(parts) >= 6
                and parts[0] == "api"
                and parts[1] == "models"
                and parts[4] == "commits"
            ):
                return self._commits(f"{parts[2]}/{parts[3]}", unquote("/".join(parts[5:])))
            if (
                len(parts) == 5
                and parts[0] == "api"
                and parts[1] == "models"
                and parts[4] == "refs"
            ):
                return self._refs(f"{parts[2]}/{parts[3]}")
            if len(parts) >= 4 and parts[0] == "api" and parts[1] == "models":
                repo_id = f"{parts[2]}/{parts[3]}"
                revision = (
                    "/".join(parts[5:]) if len(parts) > 5 and parts[4] == "revision" else "main"
                )
                return self._model_info(repo_id, revision, with_sizes="blobs" in query)
            if len(parts) >= 5 and parts[2] == "resolve":
                repo_id = f"{parts[0]}/{parts[1]}"
                return self._resolve(repo_id, parts[3], "/".join(parts[4:]))
            self._error(404, f"no such endpoint: GET {path}")

        def _visible(self, repo: Repo | None) -> bool:
            return repo is not None and (not repo.private or self._authorized())

        def _visible_commit(self, repo_id: str, revision: str) -> tuple[Repo | None, Commit | None]:
            """The repository and its commit at `revision`; (None, None) once a 404 is sent."""
            repo = hub.repos.get(repo_id)
            if not self._visible(repo):
                self._error(404, "Repository not found", "RepoNotFound")
                return None, None
            commit = repo.head(revision)
            if commit is None:
                self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
                return None, None
            return repo, commit

        def _model_info(self, repo_id: str, revision: str, with_sizes: bool):
            repo, commit = self._visible_commit(repo_id, revision)
            if commit is None:
                return
            siblings = []
            for name, content in sorted(commit.files.items()):
                sibling = {"rfilename": name}
                if with_sizes:
                    sibling["size"] = len(content)
                    sibling["blobId"] = git_blob_id(content)
                siblings.append(sibling)
            self._send(
                200,
                {
                    "id": repo_id,
                    "modelId": repo_id,
                    "sha": commit.oid,
                    "private": repo.private,
                    "siblings": siblings,
                    "tags": [],
                    "downloads": 0,
                    "likes": 0,
                },
            )

        def _commits(self, repo_id: str, revision: str):
            """The history of `revision`, newest first, as `list_repo_commits` reads it."""
            repo, commit = self._visible_commit(repo_id, revision)
            if commit is None:
                return
            history = next((h for h in repo.branches.values() if commit in h), [commit])
            upto = history[: history.index(commit) + 1]
            self._send(
                200,
                [
                    {
                        "id": c.oid,
                        "title": c.message,
                        "message": c.description,
                        "authors": [{"user": hub.user}],
                        "date": c.date,
                    }
                    for c in reversed(upto)
                ],
            )

        def _refs(self, repo_id: str):
            repo = hub.repos.get(repo_id)
            if not self._visible(repo):
                return self._error(404, "Repository not found", "RepoNotFound")
            self._send(
                200,
                {
                    "branches": [
                        {"name": name, "ref": f"refs/heads/{name}", "targetCommit": history[-1].oid}
                        for name, history in repo.branches.items()
                        if not name.startswith("refs/")
                    ],
                    "converts": [],
                    "tags": [
                        {"name": name, "ref": f"refs/tags/{name}", "targetCommit": oid}
                        for name, oid in sorted(repo.tags.items())
                    ],
                    "pullRequests": [],
                },
            )

        def _tree(self, repo_id: str, revision: str, folder: str):
            """The files under `folder` (recursive), as snapshot downloads list them first."""
            _, commit = self._visible_commit(repo_id, revision)
            if commit is None:
                return
            prefix = f"{folder.strip('/')}/" if folder.strip("/") else ""
            self._send(
                200,
                [
                    {
                        "type": "file",
                        "path": name,
                        "size": len(content),
                        "oid": hashlib.sha1(content).hexdigest(),
                    }
                    for name, content in sorted(commit.files.items())
                    if name.startswith(prefix)
                ],
            )

        def _resolve(self, repo_id: str, revision: str, file_path: str, repos: dict | None = None):
            repo = (hub.repos if repos is None else repos).get(repo_id)
            if not self._visible(repo):
                return self._error(404, "Repository not found", "RepoNotFound")
            commit = repo.head(unquote(revision))
            if commit is None:
                return self._error(404, "Invalid rev id", "RevisionNotFound")
            if file_path not in commit.files:
                return self._error(404, "Entry not found", "EntryNotFound")
            content = commit.files[file_path]
            etag = hashlib.sha1(content).hexdigest()
            self._send(
                200,
                raw=content,
                headers={
                    "ETag": f'"{etag}"',
                    "X-Repo-Commit": commit.oid,
                    "Content-Type": "application/octet-stream",
                },
            )

        # --- POST routes -------------------------------------------------------------

        def _validate_yaml(self, body: bytes):
            content = json.loads(body or b"{}").get("content", "")
            if content.startswith("---"):
                header = content.split("---", 2)[1]
                try:
                    metadata = yaml.safe_load(header)
                except yaml.YAMLError as error:
                    return self._send(400, {"errors": [{"message": f"invalid YAML: {error}"}]})
                if metadata is not None and not isinstance(metadata, dict):
                    return self._send(400, {"errors": [{"message": "metadata must be a mapping"}]})
            self._send(200, {"errors": [], "warnings": []})

        def _create_repo(self, payload: dict):
            namespace = payload.get("organization") or hub.user
            repo_id = f"{namespace}/{payload['name']}"
            url = f"{hub.endpoint}/{repo_id}"
            if repo_id in hub.repos:
                return self._send(409, {"error": "You already created this model repo", "url": url})
            private = not hub.create_public and (
                payload.get("visibility") == "private" or bool(payload.get("private"))
            )
            hub.seed_repo(repo_id, private=private)
            self._send(200, {"url": url, "name": repo_id, "id": repo_id})

        def _preupload(self, payload: dict):
            files = [
                {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                for f in payload.get("files", [])
            ]
            self._send(200, {"files": files, "commitOid": None})

        def _commit(self, repo: Repo, revision: str, body: bytes, query: dict):
            decoded = decode_commit_payload(body)
            if hub.before_next_commit is not None:
                hook, hub.before_next_commit = hub.before_next_commit, None
                hook(repo)
            for path in hub.truncate_paths & set(decoded["files"]):
                decoded["files"][path] = decoded["files"][path][:-1]
            for path in hub.corrupt_paths & set(decoded["files"]):
                content = decoded["files"][path]
                decoded["files"][path] = content[:-1] + bytes([content[-1] ^ 0xFF])
            create_pr = query.get("create_pr") == ["1"]
            with hub._lock:
                if create_pr:
                    base = repo.branches.get(revision) or repo.branches["main"]
                    number = sum(1 for name in repo.branches if name.startswith("refs/pr/")) + 1
                    branch = f"refs/pr/{number}"
                    repo.branches[branch] = [base[-1]]
                else:
                    branch = revision
                if branch not in repo.branches:
                    return self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
                head = repo.branches[branch][-1]
                parent = decoded["header"].get("parentCommit")
                if parent is not None and parent != head.oid:
                    return self._error(412, CONFLICT_MESSAGE)
                tree = dict(head.files)
                for removed in decoded["deleted"]:
                    tree = {
                        p: c
                        for p, c in tree.items()
                        if p != removed and not p.startswith(removed.rstrip("/") + "/")
                    }
                tree.update(decoded["files"])
                summary = decoded["header"].get("summary", "")
                oid = hashlib.sha1(
                    f"{repo.repo_id}:{head.oid}:{summary}:{len(repo.branches[branch])}".encode()
                ).hexdigest()
                repo.branches[branch].append(
                    Commit(oid, summary, tree, decoded["header"].get("description", ""))
                )
            lost = hub.take_fault(self.command, self.path, ("lost",))
            if lost is not None:  # the commit landed; its answer does not reach the client
                if lost.silence:
                    hub.stopping.wait(lost.seconds)
                if lost.status is None:
                    self.close_connection = True
                    return None
                return self._send(
                    lost.status, {"error": lost.message}, {"X-Error-Message": lost.message}
                )
            pr_url = (
                f"{hub.endpoint}/{repo.repo_id}/discussions/{branch.rsplit('/', 1)[-1]}"
                if create_pr
                else None
            )
            self._send(
                200,
                {
                    "commitUrl": f"{hub.endpoint}/{repo.repo_id}/commit/{oid}",
                    "commitOid": oid,
                    "pullRequestUrl": pr_url,
                },
            )

        def _tag(self, repo: Repo, revision: str, payload: dict):
            name = payload.get("tag")
            if not name:
                return self._error(400, "tag is required")
            if name in repo.tags:
                return self._error(409, f"Tag {name} already exists")
            target = repo.head(unquote(revision))
            if target is None:
                return self._error(404, "Invalid rev id", "RevisionNotFound")
            repo.tags[name] = target.oid
            self._send(200, {})

        def _branch(self, repo: Repo, branch: str, payload: dict):
            if branch in repo.branches:
                return self._error(409, "Reference already exists")
            start = repo.head(payload.get("startingPoint") or "main")
            if start is None:
                return self._error(404, "Invalid rev id", "RevisionNotFound")
            repo.branches[branch] = [start]
            self._send(200, {})

    return Handler


# --- Dataset repositories (`ccpo sync`) ---------------------------------------------------
#
# The routes huggingface_hub calls for repo_type="dataset": /api/repos/create with type
# "dataset", /api/datasets/NS/NAME[/revision/REV], .../tree/REV/PATH, .../preupload/REV,
# .../commit/REV, and /datasets/NS/NAME/resolve/REV/PATH. A commit takes its repository for
# `hub.dataset_commit_seconds`; another commit arriving meanwhile is answered 409, as the Hub
# answers a commit racing another, and the client is expected to retry.

CONCURRENT_COMMIT_MESSAGE = (
    "A commit is already being applied to this repository; retry the commit."
)


def _dataset_get(handler, hub: FakeHub, path: str, query: dict) -> bool:
    parts = path.strip("/").split("/")
    if len(parts) >= 5 and parts[0] == "datasets" and parts[3] == "resolve":
        _dataset_resolve(handler, hub, f"{parts[1]}/{parts[2]}", parts[4], "/".join(parts[5:]))
        return True
    if len(parts) < 4 or parts[:2] != ["api", "datasets"]:
        return False
    repo_id = f"{parts[2]}/{parts[3]}"
    repo = hub.datasets.get(repo_id)
    if not handler._visible(repo):
        handler._error(404, "Repository not found", "RepoNotFound")
        return True
    if len(parts) >= 6 and parts[4] == "tree":
        commit = repo.head(parts[5])
        if commit is None:
            handler._error(404, f"Invalid rev id: {parts[5]}", "RevisionNotFound")
            return True
        folder = "/".join(parts[6:]).strip("/")
        prefix = f"{folder}/" if folder else ""
        handler._send(
            200,
            [
                {
                    "type": "file",
                    "path": name,
                    "size": len(content),
                    "oid": hashlib.sha1(content).hexdigest(),
                }
                for name, content in sorted(commit.files.items())
                if name.startswith(prefix)
            ],
        )
        return True
    revision = "/".join(parts[5:]) if len(parts) > 5 and parts[4] == "revision" else "main"
    commit = repo.head(revision)
    if commit is None:
        handler._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return True
    siblings = [
        {"rfilename": name, "size": len(content)} for name, content in sorted(commit.files.items())
    ]
    handler._send(
        200,
        {
            "id": repo_id,
            "sha": commit.oid,
            "private": repo.private,
            "siblings": siblings,
            "tags": [],
            "downloads": 0,
            "likes": 0,
        },
    )
    return True


def _dataset_resolve(handler, hub: FakeHub, repo_id: str, revision: str, file_path: str) -> None:
    handler._resolve(repo_id, revision, file_path, repos=hub.datasets)


def _dataset_post(handler, hub: FakeHub, path: str, query: dict, body: bytes) -> bool:
    parts = path.strip("/").split("/")
    is_create = path == "/api/repos/create" and json.loads(body or b"{}").get("type") == "dataset"
    if not is_create and not (len(parts) >= 6 and parts[:2] == ["api", "datasets"]):
        return False
    if not handler._authorized():
        handler._error(401, "Invalid credentials in Authorization header")
        return True
    if is_create:
        payload = json.loads(body)
        repo_id = f"{payload.get('organization') or hub.user}/{payload['name']}"
        url = f"{hub.endpoint}/datasets/{repo_id}"
        repo = Repo(
            repo_id=repo_id,
            private=payload.get("visibility") == "private" or bool(payload.get("private")),
        )
        repo.branches["main"] = [
            Commit(
                hub.new_oid(repo_id),
                "initial commit",
                {".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n"},
            )
        ]
        with hub._lock:
            exists = repo_id in hub.datasets
            hub.datasets.setdefault(repo_id, repo)
        if exists:
            handler._send(409, {"error": "You already created this dataset repo", "url": url})
            return True
        handler._send(200, {"url": url, "name": repo_id, "id": repo_id})
        return True
    repo_id, action, revision = f"{parts[2]}/{parts[3]}", parts[4], "/".join(parts[5:])
    repo = hub.datasets.get(repo_id)
    if repo is None:
        handler._error(404, "Repository not found", "RepoNotFound")
    elif action == "preupload":
        handler._preupload(json.loads(body or b"{}"))
    elif action == "commit":
        _dataset_commit(handler, hub, repo, revision, body)
    else:
        handler._error(404, f"no such endpoint: POST {path}")
    return True


def _dataset_commit(handler, hub: FakeHub, repo: Repo, revision: str, body: bytes) -> None:
    def answer(status: int, *args, **kwargs) -> None:
        with hub._lock:
            hub.dataset_commit_answers.append(status)
        (handler._send if status == 200 else handler._error)(status, *args, **kwargs)

    def fail(status: int) -> None:
        with hub._lock:
            hub.dataset_commit_answers.append(status)
        message = (
            "Too many requests, slow down" if status == 429 else "Service temporarily unavailable"
        )
        handler._send(
            status, {"error": message}, headers={"X-Error-Message": message, "Retry-After": "1"}
        )

    with hub._lock:
        failure = hub.dataset_commit_failures.pop(0) if hub.dataset_commit_failures else None
        busy = failure is None and repo.repo_id in hub._datasets_committing
        if failure is None and not busy:
            hub._datasets_committing.add(repo.repo_id)
    if failure is not None:
        return fail(failure)
    if busy:
        return answer(409, CONCURRENT_COMMIT_MESSAGE)
    refusal = None
    try:
        time.sleep(hub.dataset_commit_seconds)
        decoded = decode_commit_payload(body)
        with hub._lock:
            head = repo.branches[revision][-1] if revision in repo.branches else None
            parent = decoded["header"].get("parentCommit")
            if head is None:
                refusal = (404, f"Invalid rev id: {revision}", "RevisionNotFound")
            elif parent is not None and parent != head.oid:
                refusal = (412, CONFLICT_MESSAGE)
            else:
                tree = dict(head.files)
                tree.update(decoded["files"])
                summary = decoded["header"].get("summary", "")
                oid = hashlib.sha1(
                    f"{repo.repo_id}:{head.oid}:{summary}:{len(repo.branches[revision])}".encode()
                ).hexdigest()
                repo.branches[revision].append(
                    Commit(oid, summary, tree, decoded["header"].get("description", ""))
                )
    finally:
        with hub._lock:
            hub._datasets_committing.discard(repo.repo_id)
    if refusal is not None:
        return answer(*refusal)
    lost = hub.take_fault(handler.command, handler.path, ("lost",))
    if lost is not None:  # the commit landed; its answer does not reach the client
        if lost.silence:
            hub.stopping.wait(lost.seconds)
        if lost.status is None:
            handler.close_connection = True
            return None
        return handler._send(
            lost.status, {"error": lost.message}, {"X-Error-Message": lost.message}
        )
    answer(
        200,
        {
            "commitUrl": f"{hub.endpoint}/datasets/{repo.repo_id}/commit/{oid}",
            "commitOid": oid,
            "pullRequestUrl": None,
        },
    )
