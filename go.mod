module cellguard

go 1.26
