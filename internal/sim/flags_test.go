package sim

import "flag"

func flagUint(name string, def uint64, usage string) *uint64 { return flag.Uint64(name, def, usage) }
