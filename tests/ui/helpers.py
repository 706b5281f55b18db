"""What the console tests share: a browser-like client of the console that
keeps its cookies and sends each form's CSRF token."""

import re

import httpx

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found, "the page carries no CSRF field"
    return found.group(1)


class Browserless:
    """An httpx client that acts like a browser without JavaScript: it keeps
    its cookies and posts forms with the CSRF token of a page it loaded."""

    def __init__(self, base_url: str):
        self.http = httpx.Client(base_url=base_url, timeout=30, follow_redirects=False)

    def __enter__(self) -> "Browserless":
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def get(self, path: str) -> httpx.Response:
        return self.http.get(path)

    def csrf(self, path: str = "/ui/jobs") -> str:
        page = self.http.get(path)
        if page.status_code == 303:
            page = self.http.get(page.headers["location"])
        return csrf_of(page.text)

    def post(self, path: str, data: dict[str, str], *, from_page: str = "/ui/jobs") -> httpx.Response:
        return self.http.post(path, data={"csrf": self.csrf(from_page), **data})

    def login(self, token: str) -> httpx.Response:
        return self.post("/ui/login", {"token": token}, from_page="/ui/login")
