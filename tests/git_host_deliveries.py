"""Webhook deliveries shaped as GitHub, Gitea/Forgejo, GitLab and Bitbucket (Cloud and
Server/Data Center) send them: their headers and their bodies' fields, at their real sizes
(a push with three commits and the repository object is 5 to 10 KiB), signed as each host
signs them. ``Delivery.signed(secret)`` gives the headers and body to post."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

BEFORE = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"


@dataclass(frozen=True)
class Delivery:
    host: str  # github | gitea | gitlab | bitbucket-cloud | bitbucket-server
    headers: dict[str, str]
    payload: dict[str, Any] = field(default_factory=dict)

    def body(self) -> bytes:
        return json.dumps(self.payload, indent=2).encode()

    def signed(self, secret: str) -> tuple[dict[str, str], bytes]:
        """The headers (with the host's signature or token) and the body."""
        body = self.body()
        digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        headers = {**self.headers, "Content-Type": "application/json", "Content-Length": str(len(body))}
        if self.host == "github":
            headers["X-Hub-Signature"] = "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
            headers["X-Hub-Signature-256"] = "sha256=" + digest
        elif self.host == "gitea":
            headers["X-Gitea-Signature"] = digest
            headers["X-Gogs-Signature"] = digest
            headers["X-Hub-Signature"] = "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
            headers["X-Hub-Signature-256"] = "sha256=" + digest
        elif self.host == "gitlab":
            headers["X-Gitlab-Token"] = secret
        else:
            headers["X-Hub-Signature"] = "sha256=" + digest
        return headers, body

    def unsigned(self) -> tuple[dict[str, str], bytes]:
        body = self.body()
        return {**self.headers, "Content-Type": "application/json", "Content-Length": str(len(body))}, body


def _commit(sha: str, index: int, url: str) -> dict[str, Any]:
    person = {"name": "Ada Lovelace", "email": "ada@example.com", "username": "ada"}
    return {
        "id": sha,
        "tree_id": hashlib.sha1(f"tree{index}".encode()).hexdigest(),
        "distinct": True,
        "message": f"jobs: resnet50 trains {90 + index} epochs on the new data set\n\nSigned-off-by: Ada",
        "timestamp": f"2026-12-04T10:0{index}:00Z",
        "url": f"{url}/commit/{sha}",
        "author": person,
        "committer": person,
        "added": [f"jobs/new-{index}.yaml"],
        "removed": [],
        "modified": ["jobs/resnet50.yaml", "jobs/bert.yaml"],
    }


def _commits(after: str, url: str) -> list[dict[str, Any]]:
    shas = [hashlib.sha1(f"c{i}{after}".encode()).hexdigest() for i in range(2)] + [after]
    return [_commit(sha, i, url) for i, sha in enumerate(shas)]


def _github_user(login: str, ident: int) -> dict[str, Any]:
    api = f"https://api.github.com/users/{login}"
    return {
        "name": login,
        "email": f"{login}@example.com",
        "login": login,
        "id": ident,
        "node_id": "MDQ6VXNlcjE=",
        "avatar_url": f"https://avatars.githubusercontent.com/u/{ident}?v=4",
        "gravatar_id": "",
        "url": api,
        "html_url": f"https://github.com/{login}",
        "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}",
        "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events",
        "type": "User",
        "user_view_type": "public",
        "site_admin": False,
    }


def _github_repository() -> dict[str, Any]:
    api = "https://api.github.com/repos/ml-team/jobs"
    repo: dict[str, Any] = {
        "id": 812345678,
        "node_id": "R_kgDOMG1234",
        "name": "jobs",
        "full_name": "ml-team/jobs",
        "private": True,
        "owner": _github_user("ml-team", 1234567),
        "html_url": "https://github.com/ml-team/jobs",
        "description": "Training jobs for tfdeclare",
        "fork": False,
        "url": "https://github.com/ml-team/jobs",
    }
    for name in (
        "forks",
        "keys",
        "collaborators",
        "teams",
        "hooks",
        "issue_events",
        "events",
        "assignees",
        "branches",
        "tags",
        "blobs",
        "git_tags",
        "git_refs",
        "trees",
        "statuses",
        "languages",
        "stargazers",
        "contributors",
        "subscribers",
        "subscription",
        "commits",
        "git_commits",
        "comments",
        "issue_comment",
        "contents",
        "compare",
        "merges",
        "archive",
        "downloads",
        "issues",
        "pulls",
        "milestones",
        "notifications",
        "labels",
        "releases",
        "deployments",
    ):
        repo[f"{name}_url"] = f"{api}/{name}"
    repo.update(
        {
            "created_at": 1733300000,
            "updated_at": "2026-12-04T10:00:00Z",
            "pushed_at": 1733310000,
            "git_url": "git://github.com/ml-team/jobs.git",
            "ssh_url": "git@github.com:ml-team/jobs.git",
            "clone_url": "https://github.com/ml-team/jobs.git",
            "svn_url": "https://github.com/ml-team/jobs",
            "homepage": None,
            "size": 412,
            "stargazers_count": 3,
            "watchers_count": 3,
            "language": "Python",
            "has_issues": True,
            "has_projects": True,
            "has_downloads": True,
            "has_wiki": False,
            "has_pages": False,
            "has_discussions": False,
            "forks_count": 0,
            "archived": False,
            "disabled": False,
            "open_issues_count": 2,
            "license": None,
            "allow_forking": False,
            "is_template": False,
            "topics": ["tensorflow", "gitops"],
            "visibility": "private",
            "forks": 0,
            "open_issues": 2,
            "watchers": 3,
            "default_branch": "main",
            "stargazers": 3,
            "master_branch": "main",
            "organization": "ml-team",
            "custom_properties": {},
        }
    )
    return repo


def _github_headers(event: str) -> dict[str, str]:
    return {
        "User-Agent": "GitHub-Hookshot/a1b2c3d",
        "Accept": "*/*",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-GitHub-Hook-ID": "512345678",
        "X-GitHub-Hook-Installation-Target-ID": "812345678",
        "X-GitHub-Hook-Installation-Target-Type": "repository",
    }


def github_push(ref: str, after: str, before: str = BEFORE) -> Delivery:
    url = "https://github.com/ml-team/jobs"
    commits = _commits(after, url)
    payload = {
        "ref": ref,
        "before": before,
        "after": after,
        "repository": _github_repository(),
        "pusher": {"name": "ada", "email": "ada@example.com"},
        "organization": {"login": "ml-team", "id": 1234567, "url": "https://api.github.com/orgs/ml-team"},
        "sender": _github_user("ada", 7654321),
        "created": False,
        "deleted": False,
        "forced": False,
        "base_ref": None,
        "compare": f"{url}/compare/{before[:12]}...{after[:12]}",
        "commits": commits,
        "head_commit": commits[-1],
    }
    return Delivery("github", _github_headers("push"), payload)


def github_ping() -> Delivery:
    payload = {
        "zen": "Design for failure.",
        "hook_id": 512345678,
        "hook": {
            "type": "Repository",
            "id": 512345678,
            "name": "web",
            "active": True,
            "events": ["push"],
            "config": {"content_type": "json", "insecure_ssl": "0", "secret": "********", "url": "https://x"},
            "updated_at": "2026-12-04T10:00:00Z",
            "created_at": "2026-12-04T10:00:00Z",
            "url": "https://api.github.com/repos/ml-team/jobs/hooks/512345678",
            "test_url": "https://api.github.com/repos/ml-team/jobs/hooks/512345678/test",
            "ping_url": "https://api.github.com/repos/ml-team/jobs/hooks/512345678/pings",
            "deliveries_url": "https://api.github.com/repos/ml-team/jobs/hooks/512345678/deliveries",
            "last_response": {"code": None, "status": "unused", "message": None},
        },
        "repository": _github_repository(),
        "sender": _github_user("ada", 7654321),
    }
    return Delivery("github", _github_headers("ping"), payload)


def github_event(event: str, payload: dict[str, Any]) -> Delivery:
    return Delivery("github", _github_headers(event), {**payload, "repository": _github_repository()})


def gitea_push(ref: str, after: str, before: str = BEFORE, *, forgejo: bool = False) -> Delivery:
    url = "https://git.example.com/ml-team/jobs"
    delivery = str(uuid.uuid4())
    user = {
        "id": 1,
        "login": "ada",
        "login_name": "",
        "full_name": "Ada Lovelace",
        "email": "ada@example.com",
        "avatar_url": "https://git.example.com/avatars/1",
        "language": "",
        "is_admin": False,
        "last_login": "0001-01-01T00:00:00Z",
        "created": "2026-01-01T00:00:00Z",
        "restricted": False,
        "active": False,
        "prohibit_login": False,
        "location": "",
        "website": "",
        "description": "",
        "visibility": "public",
        "followers_count": 0,
        "following_count": 0,
        "starred_repos_count": 0,
        "username": "ada",
    }
    commits = _commits(after, url)
    payload = {
        "ref": ref,
        "before": before,
        "after": after,
        "compare_url": f"{url}/compare/{before}...{after}",
        "commits": commits,
        "total_commits": len(commits),
        "head_commit": commits[-1],
        "repository": {
            "id": 140,
            "owner": user,
            "name": "jobs",
            "full_name": "ml-team/jobs",
            "description": "Training jobs",
            "empty": False,
            "private": True,
            "fork": False,
            "template": False,
            "parent": None,
            "mirror": False,
            "size": 412,
            "language": "",
            "languages_url": f"{url}/languages",
            "html_url": url,
            "url": "https://git.example.com/api/v1/repos/ml-team/jobs",
            "link": "",
            "ssh_url": "git@git.example.com:ml-team/jobs.git",
            "clone_url": f"{url}.git",
            "original_url": "",
            "website": "",
            "stars_count": 0,
            "forks_count": 0,
            "watchers_count": 1,
            "open_issues_count": 0,
            "open_pr_counter": 0,
            "release_counter": 0,
            "default_branch": "main",
            "archived": False,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-12-04T10:00:00Z",
            "permissions": {"admin": True, "push": True, "pull": True},
            "has_issues": True,
            "internal_tracker": {"enable_time_tracker": True},
            "has_wiki": True,
            "has_pull_requests": True,
            "has_projects": True,
            "has_releases": True,
            "has_packages": True,
            "has_actions": False,
            "ignore_whitespace_conflicts": False,
            "allow_merge_commits": True,
            "allow_rebase": True,
            "default_merge_style": "merge",
            "avatar_url": "",
            "internal": False,
            "mirror_interval": "",
            "object_format_name": "sha1",
        },
        "pusher": user,
        "sender": user,
    }
    headers = {
        "User-Agent": "Go-http-client/1.1",
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Event": "push",
        "X-GitHub-Event-Type": "push",
        "X-Gitea-Delivery": delivery,
        "X-Gitea-Event": "push",
        "X-Gitea-Event-Type": "push",
        "X-Gitea-Hook-Installation-Target-Type": "repository",
        "X-Gogs-Delivery": delivery,
        "X-Gogs-Event": "push",
        "X-Gogs-Event-Type": "push",
    }
    if forgejo:
        headers.update(
            {"X-Forgejo-Delivery": delivery, "X-Forgejo-Event": "push", "X-Forgejo-Event-Type": "push"}
        )
    return Delivery("gitea", headers, payload)


def gitlab_push(
    ref: str, after: str, before: str = BEFORE, *, event: str = "Push Hook", kind: str = "push"
) -> Delivery:
    url = "https://gitlab.example.com/ml-team/jobs"
    commits = _commits(after, url)
    for c in commits:
        c.pop("tree_id"), c.pop("distinct"), c.pop("committer")
        c["title"] = c["message"].splitlines()[0]
    payload = {
        "object_kind": kind,
        "event_name": kind,
        "before": before,
        "after": after,
        "ref": ref,
        "ref_protected": True,
        "checkout_sha": after,
        "message": None,
        "user_id": 4,
        "user_name": "Ada Lovelace",
        "user_username": "ada",
        "user_email": "",
        "user_avatar": "https://gitlab.example.com/uploads/-/system/user/avatar/4/avatar.png",
        "project_id": 15,
        "project": {
            "id": 15,
            "name": "jobs",
            "description": "Training jobs",
            "web_url": url,
            "avatar_url": None,
            "git_ssh_url": "git@gitlab.example.com:ml-team/jobs.git",
            "git_http_url": f"{url}.git",
            "namespace": "ml-team",
            "visibility_level": 0,
            "path_with_namespace": "ml-team/jobs",
            "default_branch": "main",
            "ci_config_path": None,
            "homepage": url,
            "url": "git@gitlab.example.com:ml-team/jobs.git",
            "ssh_url": "git@gitlab.example.com:ml-team/jobs.git",
            "http_url": f"{url}.git",
        },
        "commits": commits,
        "total_commits_count": len(commits),
        "push_options": {},
        "repository": {
            "name": "jobs",
            "url": "git@gitlab.example.com:ml-team/jobs.git",
            "description": "Training jobs",
            "homepage": url,
            "git_http_url": f"{url}.git",
            "git_ssh_url": "git@gitlab.example.com:ml-team/jobs.git",
            "visibility_level": 0,
        },
    }
    headers = {
        "User-Agent": "GitLab/18.6.0-ee",
        "X-Gitlab-Event": event,
        "X-Gitlab-Event-UUID": str(uuid.uuid4()),
        "X-Gitlab-Webhook-UUID": str(uuid.uuid4()),
        "X-Gitlab-Instance": "https://gitlab.example.com",
        "Idempotency-Key": str(uuid.uuid4()),
    }
    return Delivery("gitlab", headers, payload)


def _bitbucket_links(url: str) -> dict[str, Any]:
    return {"self": {"href": url}, "html": {"href": url.replace("api.", "").replace("/2.0/repositories", "")}}


def bitbucket_cloud_push(branch: str, after: str, before: str = BEFORE, *, kind: str = "branch") -> Delivery:
    api = "https://api.bitbucket.org/2.0/repositories/ml-team/jobs"
    actor = {
        "display_name": "Ada Lovelace",
        "links": _bitbucket_links("https://api.bitbucket.org/2.0/users/%7Bada%7D"),
        "type": "user",
        "uuid": "{4c1d9f4e-8a3b-4c5e-9d2f-1a2b3c4d5e6f}",
        "account_id": "557058:4c1d9f4e-8a3b-4c5e-9d2f-1a2b3c4d5e6f",
        "nickname": "ada",
    }

    def target(sha: str) -> dict[str, Any]:
        return {
            "type": "commit",
            "hash": sha,
            "date": "2026-12-04T10:00:00+00:00",
            "author": {"type": "author", "raw": "Ada Lovelace <ada@example.com>", "user": actor},
            "message": "jobs: resnet50 trains 92 epochs\n",
            "summary": {"type": "rendered", "raw": "jobs: resnet50 trains 92 epochs\n", "markup": "markdown"},
            "links": _bitbucket_links(f"{api}/commit/{sha}"),
            "parents": [
                {"type": "commit", "hash": before, "links": _bitbucket_links(f"{api}/commit/{before}")}
            ],
        }

    commits = [target(c["id"]) for c in _commits(after, api)]
    payload = {
        "push": {
            "changes": [
                {
                    "old": {
                        "name": branch,
                        "type": kind,
                        "target": target(before),
                        "links": _bitbucket_links(api),
                    },
                    "new": {
                        "name": branch,
                        "type": kind,
                        "target": target(after),
                        "links": _bitbucket_links(api),
                    },
                    "truncated": False,
                    "created": False,
                    "forced": False,
                    "closed": False,
                    "links": {
                        "commits": {"href": f"{api}/commits?include={after}&exclude={before}"},
                        "diff": {"href": f"{api}/diff/{after}..{before}"},
                        "html": {
                            "href": f"https://bitbucket.org/ml-team/jobs/branches/compare/{after}..{before}"
                        },
                    },
                    "commits": commits,
                }
            ]
        },
        "repository": {
            "type": "repository",
            "full_name": "ml-team/jobs",
            "links": _bitbucket_links(api),
            "name": "jobs",
            "scm": "git",
            "website": None,
            "owner": actor,
            "workspace": {"type": "workspace", "uuid": "{a1b2}", "name": "ml-team", "slug": "ml-team"},
            "is_private": True,
            "project": {"type": "project", "key": "ML", "uuid": "{b2c3}", "name": "Machine learning"},
            "uuid": "{c3d4e5f6-0000-1111-2222-333344445555}",
            "parent": None,
        },
        "actor": actor,
    }
    headers = {
        "User-Agent": "Bitbucket-Webhooks/2.0",
        "X-Event-Key": "repo:push",
        "X-Hook-UUID": str(uuid.uuid4()),
        "X-Request-UUID": str(uuid.uuid4()),
        "X-Attempt-Number": "1",
    }
    return Delivery("bitbucket-cloud", headers, payload)


def bitbucket_server_push(ref: str, after: str, before: str = BEFORE) -> Delivery:
    actor = {
        "name": "ada",
        "emailAddress": "ada@example.com",
        "id": 2,
        "displayName": "Ada Lovelace",
        "active": True,
        "slug": "ada",
        "type": "NORMAL",
    }
    display = ref.removeprefix("refs/heads/").removeprefix("refs/tags/")
    payload = {
        "eventKey": "repo:refs_changed",
        "date": "2026-12-04T10:00:00+0000",
        "actor": actor,
        "repository": {
            "slug": "jobs",
            "id": 84,
            "name": "jobs",
            "hierarchyId": "af05451fc6eb4bbc2a9d",
            "scmId": "git",
            "state": "AVAILABLE",
            "statusMessage": "Available",
            "forkable": True,
            "project": {"key": "ML", "id": 84, "name": "Machine learning", "public": False, "type": "NORMAL"},
            "public": False,
            "archived": False,
        },
        "changes": [
            {
                "ref": {"id": ref, "displayId": display, "type": "TAG" if "/tags/" in ref else "BRANCH"},
                "refId": ref,
                "fromHash": before,
                "toHash": after,
                "type": "UPDATE",
            }
        ],
        "commits": [
            {"id": c["id"], "displayId": c["id"][:11], "message": c["message"]} for c in _commits(after, "")
        ],
    }
    headers = {
        "User-Agent": "Atlassian HttpClient 4.2.0 / Bitbucket-9.4.0 (9004000) / Default",
        "X-Event-Key": "repo:refs_changed",
        "X-Request-Id": str(uuid.uuid4()),
    }
    return Delivery("bitbucket-server", headers, payload)


def bitbucket_server_ping() -> Delivery:
    headers = {
        "User-Agent": "Atlassian HttpClient 4.2.0 / Bitbucket-9.4.0 (9004000) / Default",
        "X-Event-Key": "diagnostics:ping",
        "X-Request-Id": str(uuid.uuid4()),
    }
    return Delivery("bitbucket-server", headers, {"test": True})
