"""Publishing a run to the Hugging Face Hub while it trains (`ccpo train --push-to-hub`,
`ccpo publish --follow`): the target (target.py), what each evaluation calls for (plan.py), the
outbox worker (uploader.py), the background process beside a trainer (background.py), following
a run trained elsewhere (follow.py) and the status table (status.py). The commits themselves,
their verification and tags are `ccpo_cli/hub.py`; the bounded transport is `hub_access.py` and
`hub_transport.py`; the durable queue is `store/outbox.py`. See docs/publishing.md."""
