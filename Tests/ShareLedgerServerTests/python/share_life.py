#!/usr/bin/env python3
"""A share's whole life against `share-ledger serve`, from Python's standard library only.

Written from docs/openapi.yaml alone (no ShareLedger code): the owner creates a zone, a record and a
share inviting the participant by email; the participant resolves and accepts the shortGUID; the
zone then appears in the participant's shared database (zones/list). Exits 0 when every step
answers as the document says, 1 (with the step) otherwise.

Environment: SL_BASE_URL, SL_CONTAINER, SL_API_TOKEN, SL_OWNER_TOKEN, SL_PARTICIPANT_TOKEN,
SL_PARTICIPANT_EMAIL, SL_OWNER_NAME.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

BASE = os.environ["SL_BASE_URL"]
CONTAINER = os.environ["SL_CONTAINER"]
API_TOKEN = os.environ["SL_API_TOKEN"]
OWNER = os.environ["SL_OWNER_TOKEN"]
PARTICIPANT = os.environ["SL_PARTICIPANT_TOKEN"]


def call(database, subpath, user_token, body=None, method="POST"):
    query = urllib.parse.urlencode({"ckAPIToken": API_TOKEN, "ckWebAuthToken": user_token})
    url = f"{BASE}/database/1/{urllib.parse.quote(CONTAINER)}/development/{database}/{subpath}?{query}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def check(step, condition, detail=""):
    if not condition:
        print(f"FAILED: {step} {detail}", file=sys.stderr)
        sys.exit(1)


def main():
    # Without ckWebAuthToken: 421 AUTHENTICATION_REQUIRED.
    status, body = call("public", "users/caller", "", method="GET")
    check("authentication required", status == 421 and body.get("serverErrorCode") == "AUTHENTICATION_REQUIRED", body)

    status, body = call("private", "zones/modify", OWNER,
                        {"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": "PyZone"}}}]})
    check("zones/modify", status == 200, body)

    status, body = call("private", "records/modify", OWNER, {
        "zoneID": {"zoneName": "PyZone"},
        "operations": [{"operationType": "create",
                        "record": {"recordName": "py-1", "recordType": "Note",
                                   "fields": {"title": {"value": "From Python", "type": "STRING"}}}}]})
    check("records/modify (record)", status == 200 and "recordChangeTag" in body["records"][0], body)

    status, body = call("private", "records/modify", OWNER, {
        "zoneID": {"zoneName": "PyZone"},
        "operations": [{"operationType": "create",
                        "record": {"recordType": "cloudkit.share", "forRecord": {"recordName": "py-1"},
                                   "publicPermission": "NONE",
                                   "participants": [{"userIdentity": {"lookupInfo": {
                                       "emailAddress": os.environ["SL_PARTICIPANT_EMAIL"]}},
                                       "permission": "READ_ONLY", "type": "USER"}]}}]})
    check("records/modify (share)", status == 200 and "shortGUID" in body["records"][0], body)
    short_guid = body["records"][0]["shortGUID"]

    status, body = call("public", "records/resolve", PARTICIPANT,
                        {"shortGUIDs": [{"value": short_guid, "shouldFetchRootRecord": True}]})
    result = body.get("results", [{}])[0]
    check("records/resolve", status == 200 and result.get("participantStatus") == "INVITED"
          and result.get("rootRecord", {}).get("recordName") == "py-1", body)

    status, body = call("public", "records/accept", PARTICIPANT, {"shortGUIDs": [{"value": short_guid}]})
    check("records/accept", status == 200 and body["results"][0].get("participantStatus") == "ACCEPTED", body)

    deadline = time.monotonic() + 30
    while True:
        status, body = call("shared", "zones/list", PARTICIPANT, method="GET")
        check("zones/list", status == 200, body)
        if any(zone["zoneID"]["zoneName"] == "PyZone" and zone["zoneID"].get("ownerRecordName") == os.environ["SL_OWNER_NAME"]
               for zone in body["zones"]):
            break
        check("zone in the shared database within 30 s", time.monotonic() < deadline, body)
        time.sleep(0.05)

    status, body = call("shared", "records/lookup", PARTICIPANT, {
        "zoneID": {"zoneName": "PyZone", "ownerRecordName": os.environ["SL_OWNER_NAME"]},
        "records": [{"recordName": "py-1"}]})
    check("records/lookup (shared)", status == 200 and body["records"][0].get("recordType") == "Note", body)
    print("ok")


if __name__ == "__main__":
    main()
