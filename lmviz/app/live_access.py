"""Who may do what in the live class: the one file a security review reads.

- **Opening a room** takes the server's teacher key (LMVIZ_LIVE_KEY, brought once by ``?key=``) whenever the
  browser may be anyone's: a public deployment (LMVIZ_ALLOWED_MODELS), a server with a public address
  (LMVIZ_PUBLIC_URL, which a load balancer's replicas have), a request that came through a proxy (it carries a
  forwarding header: the shipped HAProxy adds X-Forwarded-For), or a browser on another computer. Only a browser
  on the teacher's own laptop, with none of these, opens a room without it. A proxy header is never trusted to
  *grant* anything: its presence only takes the loopback exemption away, so forging one gains nothing.
- **Running a room** (Ask, Reveal, Close, Approve, End) takes the room's teacher secret: 128 random bits made when
  the room is opened, kept in the teacher's session and in a cookie of the teacher's browser (so that a reload,
  which starts a new session, finds it), and as a hash in the database. It is never in a link the room sees, on
  the projector, or in what a phone receives. The room's code, on the projector for all to read, grants nothing:
  ``?teaching=CODE`` in a teacher's links only says which room, and a browser without the secret gets no control.
  A second teacher window (a presenter view, the teacher's phone) opens the link the teacher copies from the Live
  class page (``?teacher=SECRET``), which leaves the address bar at once.
- **A phone** is a random participant token per room, kept in a cookie of its browser, so that a second tab or a
  second scan of the QR code is the same participant. No name, no address.

Cookies are written by a line of JavaScript in the page (Streamlit can read a request's cookies, not set them)."""

from __future__ import annotations

import hmac
import ipaddress
import json
import os

import streamlit as st

from lmviz.live.codes import is_token, new_token
from lmviz.live.store import Store
from lmviz.models.settings import allowed_models

LIVE_VARIABLE, KEY_VARIABLE, PUBLIC_URL_VARIABLE = "LMVIZ_LIVE", "LMVIZ_LIVE_KEY", "LMVIZ_PUBLIC_URL"
KEY_PARAM = "key"  # in a link: the server's teacher key, which opens rooms
SECRET_PARAM = "teacher"  # in the link a teacher copies for a second window: one room's teacher secret
TEACHING_PARAM = "teaching"  # in a teacher's links: the room this browser runs, if it holds the room's secret
TEACHER_KEY = "live-teacher-key"  # session state: the teacher key a link brought
SECRETS_KEY = "live-teacher-secrets"  # session state: {room code: its teacher secret} this session holds
# Behind these, the request came through a proxy: the visitor may be anywhere
PROXY_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-Ip")
COOKIES_WRITTEN = "live-cookies-written"  # session state: the cookies this session's page has set
COOKIE_HOURS = 12  # a teacher's and a phone's cookie: a school day
TEACHER_COOKIE, PHONE_COOKIE = "lmviz_teach_", "lmviz_phone_"  # + the room's code

OFF = ("The live class is turned off on this server (LMVIZ_LIVE=off): the lessons and their questions work as "
       "always.")


def live_on() -> bool:
    return os.environ.get(LIVE_VARIABLE, "").strip().lower() not in ("off", "0", "false", "no")


def take_links() -> None:
    """A link's ?key= (the server's teacher key) and ?teacher= (a room's secret) moved into the session and out of
    the address bar at once, before anything is drawn: the projector shows the address bar to the whole room."""
    if KEY_PARAM in st.query_params:
        st.session_state[TEACHER_KEY] = st.query_params[KEY_PARAM]
        del st.query_params[KEY_PARAM]
    if SECRET_PARAM in st.query_params:
        secret, code = st.query_params[SECRET_PARAM], st.query_params.get(TEACHING_PARAM)
        del st.query_params[SECRET_PARAM]
        if is_token(secret) and code:  # checked against the room when the page adopts it (runs)
            hold_secret(code, secret)


def is_public() -> bool:
    """Whether this browser may be anyone's (the module's docstring): only a browser on the server's own computer,
    on a server with no public address and reached through no proxy, is whoever is at its keyboard."""
    return _server_is_public() or _remote(st.context.ip_address)


def _server_is_public() -> bool:
    """A public deployment, a server with a public address, or a request through a proxy: nobody, wherever they
    sit, opens a room here without the key."""
    public_address = bool(os.environ.get(PUBLIC_URL_VARIABLE, "").strip())
    return allowed_models() is not None or public_address or came_through_proxy()


def came_through_proxy() -> bool:
    """Whether this request carries a proxy's forwarding header: then its visitor may be anywhere, whatever address
    it reached Streamlit from. Read for what it takes away (the loopback exemption here, a visitor naming a folder
    of the server in lmviz.app.choosers), never for what it would grant."""
    return any(header in st.context.headers for header in PROXY_HEADERS)


def _remote(address) -> bool:
    """Whether a browser's address is another computer's. Streamlit gives None for loopback; an address that is not
    text (Streamlit's own AppTest has no client) is no other computer's."""
    if not isinstance(address, str):
        return False
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return True
    return not (ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback))


def opening_refusal() -> str | None:
    """None when this browser may open a room; else the sentence that says why not and what to do."""
    if not live_on():
        return OFF
    if not is_public():
        return None
    expected = os.environ.get(KEY_VARIABLE, "")
    if not expected and _remote(st.context.ip_address) and not _server_is_public():
        return ("Only the computer lmviz runs on can open a room here, since this server has no teacher key: open "
                "this page there, or set LMVIZ_LIVE_KEY on the server and add ?key= and the key to this page's "
                "address.")
    if not expected:
        return ("This server is reached through a proxy or has a public address, so a room takes the teacher key, "
                "and none is set: set LMVIZ_LIVE_KEY on the server, then add ?key= and the key to this page's "
                "address.")
    given = st.session_state.get(TEACHER_KEY)
    if given and hmac.compare_digest(given.encode(), expected.encode()):
        return None
    if given:
        return "That teacher key is not this server's: open this page again with ?key= and the key in LMVIZ_LIVE_KEY."
    return ("Opening a room on this server takes the teacher key: add ?key= and the key (LMVIZ_LIVE_KEY) to this "
            "page's address; it leaves the address bar at once.")


def new_teacher_secret() -> str:
    """The secret of a room this session is opening: give it to Store.open_room, then to hold_secret."""
    return new_token()


def hold_secret(code: str, secret: str) -> None:
    st.session_state.setdefault(SECRETS_KEY, {})[code] = secret


def teacher_secret(code: str) -> str | None:
    """The secret of the room ``code`` this session holds (the room it opened, or one a copied link brought)."""
    return st.session_state.get(SECRETS_KEY, {}).get(code)


def runs(store: Store, code: str) -> bool:
    """Whether this browser runs the room ``code``: it holds the room's secret, from its session (the room it
    opened, or a copied teacher link) or from its cookie (a reload). The code alone is anyone's."""
    for secret in (teacher_secret(code), cookie(TEACHER_COOKIE + code)):
        if is_token(secret) and store.is_teacher(code, secret):
            hold_secret(code, secret)
            return True
    return False


def remember_teacher(code: str) -> None:
    """The room's secret in a cookie of this browser, so that a reload of any page keeps the teacher's room."""
    secret = teacher_secret(code)
    if secret and cookie(TEACHER_COOKIE + code) != secret:
        set_cookie(TEACHER_COOKIE + code, secret)


def remembered_token(code: str) -> str | None:
    """The participant token this browser has in the room ``code``, from its cookie: a second tab, or a second
    scan of the QR code, is the same participant."""
    token = cookie(PHONE_COOKIE + code)
    return token if is_token(token) else None


def remember_phone(code: str, token: str) -> None:
    if cookie(PHONE_COOKIE + code) != token:
        set_cookie(PHONE_COOKIE + code, token)


def cookie(name: str) -> str | None:
    """A cookie of the browser's request (the WebSocket's): what an earlier page of this browser set."""
    return st.context.cookies.get(name)


def set_cookie(name: str, value: str) -> None:
    """A first-party cookie, for the app's whole path, kept COOKIE_HOURS; Secure where the page is on https. Once
    per session: the request's cookies (st.context.cookies) are those of the page's load, so they do not show it."""
    written = st.session_state.setdefault(COOKIES_WRITTEN, {})
    if written.get(name) == value:
        return
    written[name] = value
    script = (f"document.cookie = {json.dumps(f'{name}={value}')} + '; path=/; max-age={COOKIE_HOURS * 3600}; "
              "SameSite=Lax' + (location.protocol === 'https:' ? '; Secure' : '');")
    st.html(f"<script>{script}</script>", unsafe_allow_javascript=True)
