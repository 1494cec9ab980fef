package netem

import "time"

// timerSlack is how late a runtime timer may fire: on Linux the netpoller
// waits in whole milliseconds, so a 200 µs timer fires after about 1.1 ms
// (measured: time.Sleep of 50 µs to 500 µs took 1.09-1.10 ms on a two-core
// Linux VM). A delay line waits on a runtime timer only for what exceeds
// it, and on a preciseTimer for the rest.
const timerSlack = 1500 * time.Microsecond
