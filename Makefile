# Shortcuts for the scripts in scripts/ (the README's two commands).
.PHONY: run test bench protos

run:
	scripts/run

test:
	scripts/test

bench:
	swift build -c release --product share-ledger
	.build/release/share-ledger bench --path ./.share-ledger-bench --repeats 3

protos:
	scripts/generate-protos
