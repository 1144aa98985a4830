--- kinformer.clock (internal): the clock the informers' resync timing and the discovery
-- refresh interval read.
--
-- Contract: clock.now() -> seconds on the monotonic clock (kinformer.core.now). The informer
-- and discovery modules read the field on every use, never cache it, so a spec can set
-- clock.now to a fake clock (client-go's fake clock) and restore core.now after. Nothing else
-- writes it.
local core = require "kinformer.core"

return { now = core.now }
