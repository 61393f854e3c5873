module opshooks-bench-peer

go 1.22
