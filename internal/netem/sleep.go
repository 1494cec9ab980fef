package netem

import "time"

// timerSlack is how late a runtime timer may fire: on Linux the netpoller
// waits in whole milliseconds, so a 200 µs timer fires after about 1.1 ms
// (measured: time.Sleep of 50 µs to 500 µs took 1.09-1.10 ms on a two-core
// Linux VM). A delay line waits on a timer only for what exceeds it, and
// sleeps the rest with preciseSleepUntil.
const timerSlack = 1500 * time.Microsecond

// nanosleepOvershoot is how late nanosleep(2) returns (the kernel's timer
// slack, 50 µs by default, and the system call): preciseSleepUntil asks
// for that much less.
const nanosleepOvershoot = 60 * time.Microsecond
