"""Prints a curl config (`curl -Z -K FILE`) of COUNT one-row POSTs to
BASE/rows?table=orders, under the keys PREFIX1 .. PREFIX{COUNT}.

usage: curl_posts.py PREFIX COUNT BASE TOKEN (--body FILE | --rows FIRST_ID DS)
  --body FILE         every POST sends FILE (one body for all keys);
  --rows FIRST_ID DS  POST i sends its own order, id FIRST_ID + i, of day DS,
                      as bench/post_replay.lua's ROW_BASE mode builds it
                      (the two must agree byte for byte: a replay is
                      refused when its body is not its key's).
The config holds the token: write it where only its owner reads.
"""
import sys


def row(order_id, ds):
    # The same bytes as post_replay.lua's `row_body`.
    return (f'{{"order_id":{order_id},"ds":"{ds}","customer_id":1,"status":"paid",'
            f'"amount":1.25,"updated_at":"{ds}T01:02:03Z","note":"old"}}\n')


def quoted(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


prefix, count, base, token, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
for i in range(1, count + 1):
    if i > 1:
        print("next")
    print(f'url = "{base}/rows?table=orders"\nrequest = "POST"\noutput = "/dev/null"\n'
          f'write-out = "%{{http_code}}\\n"\nheader = "authorization: Bearer {token}"\n'
          f'header = "content-type: application/x-ndjson"\nheader = "idempotency-key: {prefix}{i}"')
    if mode == "--body":
        print(f'data-binary = "@{sys.argv[6]}"')
    else:
        print(f"data-binary = {quoted(row(int(sys.argv[6]) + i, sys.argv[7]))}")
