-- Argo CD health check for gdpval.io/GdpvalRun (argocd-cm key
-- resource.customizations.health.gdpval.io_GdpvalRun). Argo CD runs it with gopher-lua (Lua 5.1)
-- and `obj` bound to the live object.
--
--   Healthy      the run succeeded (condition Succeeded=True, state Succeeded)
--   Degraded     the run failed (condition Failed=True, state Failed), or it is blocked on
--                something only a person can fix (state Blocked: a missing Secret, unreachable storage)
--   Suspended    spec.suspend is set and the operator reports the run suspended
--   Progressing  anything else, including a status the operator has not yet written for the
--                current generation (status.observedGeneration < metadata.generation)

local function condition(status, kind)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function is_true(c)
  return c ~= nil and c.status == "True"
end

local function text(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  if c ~= nil and c.reason ~= nil and c.reason ~= "" then
    return c.reason
  end
  return fallback
end

local hs = {}
local status = obj.status
local generation = (obj.metadata ~= nil and obj.metadata.generation) or 0

if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to pick up the run"
  return hs
end

-- A status written for an older spec says nothing about the current one.
local observed = status.observedGeneration or 0
if observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local ready = condition(status, "Ready")
local succeeded = condition(status, "Succeeded")
local failed = condition(status, "Failed")

if is_true(succeeded) or (succeeded == nil and status.state == "Succeeded") then
  hs.status = "Healthy"
  hs.message = text(succeeded, "Submission ready")
  if status.submissionURI ~= nil then
    hs.message = hs.message .. " (" .. status.submissionURI .. ")"
  end
  return hs
end

if is_true(failed) or (failed == nil and status.state == "Failed") then
  hs.status = "Degraded"
  hs.message = text(failed, text(ready, "The run failed"))
  return hs
end

if status.state == "Blocked" then
  hs.status = "Degraded"
  hs.message = text(ready, "The run is blocked")
  return hs
end

local suspended = condition(status, "Suspended")
local suspend_requested = obj.spec ~= nil and obj.spec.suspend == true
if suspend_requested and (is_true(suspended) or status.state == "Suspended") then
  hs.status = "Suspended"
  hs.message = text(suspended, "Suspended: no new sample pods start")
  return hs
end

hs.status = "Progressing"
local progress = ""
if status.progress ~= nil and status.progress ~= "" then
  progress = " [" .. status.progress .. "]"
end
hs.message = text(ready, status.state or "In progress") .. progress
return hs
