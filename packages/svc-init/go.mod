module svc/svc-init

go 1.19
