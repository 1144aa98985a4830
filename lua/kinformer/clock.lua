--- kinformer.clock (internal): the clock the informers' resync timing, the discovery refresh
-- interval and the REST client's waits (throttling, Retry-After) read.
--
-- Contract: clock.now() -> seconds on the monotonic clock (kinformer.core.now); clock.sleep(s)
-- blocks the calling thread s seconds (kinformer.core.sleep: not cut short by a signal, which
-- stays for kinformer's next wait to report). The modules read the fields on every use, never
-- cache them, so a spec can set clock.now and clock.sleep to a fake clock (client-go's fake
-- clock) and restore the core functions after. Nothing else writes them.
local core = require "kinformer.core"

return { now = core.now, sleep = core.sleep }
