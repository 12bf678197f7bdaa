#!/usr/bin/env python3
# NATS keys and credentials for tests, made as the nk and nsc tools would
# (neither is in Debian): ed25519 keys from openssl in nkey encoding, and
# JWTs signed as nats-server checks them (ed25519-nkey).
# usage: nats_auth.py nkey DIR: writes DIR/seed (SU...) of a new user key
#          and prints its public key (U...)
#        nats_auth.py jwt DIR: writes DIR/resolver.conf (an operator, a
#          MEMORY resolver, an account preloaded: include it in a server
#          config), DIR/user.creds (a user of that account) and
#          DIR/stranger.creds (a user of an account the server does not
#          know)
import base64
import binascii
import hashlib
import json
import subprocess
import sys
import time

command, d = sys.argv[1], sys.argv[2]


def openssl(*args):
    return subprocess.run(["openssl", *args], check=True,
                          capture_output=True).stdout


def nkey_text(b):  # base32 of the bytes and their CRC-16 (XMODEM), unpadded
    crc = binascii.crc_hqx(b, 0)
    return base64.b32encode(b + bytes([crc & 0xFF, crc >> 8])).decode().rstrip("=")


# The nkey prefix byte of each kind of key, and of a seed.
KIND = {"operator": 14 << 3, "account": 0, "user": 20 << 3}
SEED = 18 << 3


class Key:
    def __init__(self, name, kind):
        self.pem = f"{d}/{name}.pem"
        self.kind = KIND[kind]
        openssl("genpkey", "-algorithm", "ed25519", "-out", self.pem)
        self.public = nkey_text(bytes([self.kind]) + self._raw("-pubout"))

    def _raw(self, *args):  # the 32 key bytes end the DER encoding
        return openssl("pkey", "-in", self.pem, *args, "-outform", "DER")[-32:]

    def seed(self):
        return nkey_text(bytes([SEED | self.kind >> 5, (self.kind & 31) << 3])
                         + self._raw())

    def sign(self, data):
        with open(f"{d}/to-sign", "wb") as f:
            f.write(data)
        return openssl("pkeyutl", "-sign", "-inkey", self.pem, "-rawin",
                       "-in", f"{d}/to-sign")


def b64(b):
    return base64.urlsafe_b64encode(b).decode().rstrip("=")


def jwt(issuer, subject, name, nats):
    claims = {"iat": int(time.time()), "iss": issuer.public, "name": name,
              "sub": subject, "nats": dict(nats, version=2)}
    claims["jti"] = base64.b32encode(hashlib.sha256(
        json.dumps(claims, sort_keys=True).encode()).digest()).decode().rstrip("=")
    head = b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = b64(json.dumps(claims).encode())
    return f"{head}.{body}.{b64(issuer.sign(f'{head}.{body}'.encode()))}"


UNLIMITED = {"subs": -1, "data": -1, "payload": -1}


def creds(path, account, name):
    user = Key(name, "user")
    token = jwt(account, user.public, name,
                dict(UNLIMITED, type="user", pub={}, sub={}))
    with open(path, "w") as f:
        f.write("-----BEGIN NATS USER JWT-----\n" + token +
                "\n------END NATS USER JWT------\n\n"
                "-----BEGIN USER NKEY SEED-----\n" + user.seed() +
                "\n------END USER NKEY SEED------\n")


if command == "nkey":
    user = Key("user", "user")
    with open(f"{d}/seed", "w") as f:
        f.write(user.seed() + "\n")
    print(user.public)
elif command == "jwt":
    operator = Key("operator", "operator")
    account = Key("account", "account")
    stranger = Key("stranger-account", "account")
    account_jwt = jwt(operator, account.public, "kvmesh", {
        "type": "account",
        "limits": dict(UNLIMITED, imports=-1, exports=-1, wildcards=True,
                       conn=-1, leaf=-1)})
    creds(f"{d}/user.creds", account, "user")
    creds(f"{d}/stranger.creds", stranger, "stranger")
    with open(f"{d}/resolver.conf", "w") as f:
        f.write('operator: "%s"\nresolver: MEMORY\nresolver_preload: {\n'
                '  %s: "%s"\n}\n' % (
                    jwt(operator, operator.public, "kvmesh-test", {"type": "operator"}),
                    account.public, account_jwt))
else:
    sys.exit(f"nats_auth.py: unknown command {command}: nkey or jwt")
