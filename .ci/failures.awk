# Prints why each failed test failed, from a `go test -v` log (tests run
# one at a time: -p 1, none parallel), so that CI's printed tail says why,
# not only which: the test's own messages (file.go:N: lines, at most 60:
# a helper outside a _test.go file reports its own file), then the last
# 40 lines of its output (the logs it printed last).
/^=== RUN / {
	if (index($3, "/") == 0) { name = $3; n = 0 }
}
{ buf[n++] = $0 }
/^--- FAIL: / {
	if ($3 != name) next
	print "===== why " name " failed ====="
	m = 0
	for (i = 0; i < n && m < 60; i++)
		if (buf[i] ~ /^[ \t]+[A-Za-z0-9_.]+\.go:[0-9]+: /) { print buf[i]; m++ }
	print "----- its last lines -----"
	for (i = (n > 40 ? n - 40 : 0); i < n; i++) print buf[i]
}
