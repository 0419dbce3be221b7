"""The REST check for `verify` (rest: true): Slurm's REST API with JWT, as a portal uses it.

Plain HTTP (urllib: no generated OpenAPI client on PyPI matches each release's API
version), the newest API version the release serves, discovered from its OpenAPI
document; the job's fields are shaped as that document says (22.05's v0.0.38 takes the
environment as a mapping and the script beside the job, v0.0.40+ a list and the script
in it). With accounting, the job is read back from slurmdbd's endpoint too.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

from provisioner.cluster.model.wait import WaitTimeout, poll_until
from provisioner.cluster.services import rest
from provisioner.verify.context import VerifyContext
from provisioner.verify.outcome import CheckFailed, Outcome

JOB_NAME = "simcluster-rest-check"
ENDED = ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED")


def _schema(doc: Dict, ref: Dict) -> Dict:
    """A schema of the OpenAPI document, following one $ref."""
    if "$ref" in ref:
        return doc["components"]["schemas"][ref["$ref"].rsplit("/", 1)[-1]]
    return ref


def job_request(doc: Dict, version: str, script: str, nodes: int, cwd: str, env: Dict[str, str]) -> Dict:
    """The body of POST /slurm/<version>/job/submit, shaped as this API version's schema says."""
    post = doc["paths"][f"/slurm/{version}/job/submit"]["post"]
    body = _schema(doc, post["requestBody"]["content"]["application/json"]["schema"])
    job_schema = _schema(doc, body["properties"]["job"])["properties"]
    as_list = job_schema.get("environment", {}).get("type") == "array" or "$ref" in job_schema.get("environment", {})
    job: Dict[str, Any] = {"name": JOB_NAME, "nodes": str(nodes), "tasks": nodes, "tasks_per_node": 1,
                           "current_working_directory": cwd, "standard_output": "/dev/null",
                           "environment": [f"{k}={v}" for k, v in env.items()] if as_list else dict(env)}
    if "script" in job_schema:
        job["script"] = script
        return {"job": job}
    return {"script": script, "job": job}


def _state(value: Any) -> str:
    """A job state as v0.0.38 gives it ("COMPLETED") or v0.0.40+ (["COMPLETED"])."""
    if isinstance(value, dict):
        value = value.get("current")
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value or "")


def _number(value: Any) -> int:
    """A count as v0.0.38 gives it (2) or v0.0.40+ ({"set": true, "number": 2})."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else 0
    return int(value or 0)


def refused(url: str, path: str, user: Optional[str], tok: Optional[str]) -> Tuple[bool, str]:
    """Is a request without a valid token refused? (status, and whether data leaked)."""
    try:
        answer = rest.request(url, path, user, tok, timeout=15)
    except rest.RestError as exc:
        # 401 where slurmrestd checks the token itself; 22.05 passes it on to slurmctld,
        # which refuses it, and answers 500 with that error and no data.
        try:
            data = json.loads(exc.body)
        except ValueError:
            data = {}
        leaked = isinstance(data, dict) and bool(data.get("jobs"))
        return exc.status == 401 or (exc.status >= 500 and not leaked), f"HTTP {exc.status}"
    return False, f"answered with data: {str(answer)[:200]}"


def check_rest(ctx: VerifyContext) -> Outcome:
    """A 2-node job over REST with a token from `scontrol token`, polled to COMPLETED and
    read back (and from slurmdbd with accounting); no token and a bad token are refused."""
    url = getattr(ctx.target, "rest_url", None)
    if not url:
        raise CheckFailed("the cluster has no slurmrestd URL (was it made with --rest?)")
    res = ctx.client.run(["scontrol", "token", "lifespan=600"], timeout=20)
    tok = next((line.split("=", 1)[1] for line in res.stdout.splitlines() if line.startswith("SLURM_JWT=")), "")
    if not tok:
        raise CheckFailed(f"scontrol token failed: {(res.stderr or res.stdout).strip()[-300:]}")
    user = rest.token_user(tok)
    try:
        found = rest.versions(url, user, tok)
        version = rest.newest(found)
        if not version:
            raise CheckFailed(f"slurmrestd at {url} serves no slurmctld API version")
        doc = rest.request(url, "/openapi/v3", user, tok)
        nodes = min(2, len(ctx.node_names))
        workdir = ctx.cluster_path(ctx.check_dir("rest.api"))
        body = job_request(doc, version, "#!/bin/sh\nsrun hostname\n", nodes, workdir,
                           {"PATH": "/usr/local/bin:/usr/bin:/bin"})
        answer = rest.request(url, f"/slurm/{version}/job/submit", user, tok, body)
        job_id = str(answer.get("job_id") or (answer.get("result") or {}).get("job_id") or "")
        if not job_id:
            raise CheckFailed(f"submission over REST gave no job id: {str(answer)[:300]}")
        ctx.jobs.append(job_id)
        seen: Dict[str, Any] = {}

        def done() -> Tuple[bool, None]:
            jobs = rest.request(url, f"/slurm/{version}/job/{job_id}", user, tok).get("jobs") or [{}]
            seen.update(jobs[0])
            state = _state(seen.get("job_state"))
            return state == "COMPLETED" or any(s in state for s in ENDED), None
        try:
            poll_until(done, ctx.limit(60), first_delay=0.2, max_delay=0.5)
        except WaitTimeout:
            raise CheckFailed(f"job {job_id} never ended over REST (last state {_state(seen.get('job_state'))})")
        state = _state(seen.get("job_state"))
        if state != "COMPLETED" or _number(seen.get("node_count")) != nodes:
            raise CheckFailed(f"job {job_id} ended {state} on {seen.get('nodes')} ({seen.get('node_count')} nodes)")
        detail = f"{version} of {', '.join(found)}: job {job_id} COMPLETED on {seen.get('nodes')}"
        if ctx.spec.accounting:
            db: Dict[str, Any] = {}

            def recorded() -> Tuple[bool, None]:
                jobs = rest.request(url, f"/slurmdb/{version}/job/{job_id}", user, tok).get("jobs") or [{}]
                db.update(jobs[0])
                return _state(db.get("state")) == "COMPLETED" and db.get("nodes") not in (None, "", "None assigned"), None
            try:
                poll_until(recorded, ctx.limit(60), first_delay=0.2, max_delay=0.5)
            except WaitTimeout:
                raise CheckFailed(f"slurmdbd's endpoint never showed job {job_id} COMPLETED "
                                  f"(last {_state(db.get('state')) or 'nothing'})")
            detail += f", and in slurmdbd ({db.get('nodes')})"
        listing = f"/slurm/{version}/jobs"
        for what, u, t in (("no token", None, None), ("a bad token", user, tok[:-6] + "AAAAAA")):
            ok, how = refused(url, listing, u, t)
            if not ok:
                raise CheckFailed(f"a request with {what} was not refused: {how}")
        detail += "; no token and a bad token refused"
    except rest.RestError as exc:
        raise CheckFailed(str(exc), hint=ctx.target.log_hint("slurmrestd")) from None
    except OSError as exc:
        raise CheckFailed(f"slurmrestd at {url} did not answer: {exc}", hint=ctx.target.log_hint("slurmrestd")) from None
    return Outcome(detail, data={"versions": found, "version": version, "job_id": job_id})
