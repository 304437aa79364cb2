-- Argo CD health check for kvpilot.dev/InferenceDeployment.
-- Degraded: settings rejected for the model's layout, the model config cannot be read, or
-- replicas keep failing and their replacements back off.
-- Progressing: the controller has not seen this generation yet, or pods are rolling out.
-- Healthy: every decode pod of the current revision is ready.
-- Written for Lua 5.1 (Argo CD's gopher-lua) and Lua 5.4 alike.
local hs = { status = "Progressing", message = "Waiting for kvpilot to reconcile" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and obj.status.observedGeneration ~= nil and obj.status.observedGeneration < generation then
  hs.message = "Waiting for kvpilot to observe generation " .. tostring(generation)
  return hs
end
local conditions = {}
for _, condition in ipairs(obj.status.conditions) do
  conditions[condition.type] = condition
end
local function describe(condition)
  local text = condition.reason or ""
  if condition.message ~= nil and condition.message ~= "" then
    text = text .. ": " .. condition.message
  end
  return text
end
-- A False condition of these types degrades the resource; the first one found is reported.
local failures = {
  { type = "SettingsValid", meaning = "Settings rejected for the model's layout" },
  { type = "ModelResolved", meaning = "Model config unresolved" },
}
for _, failure in ipairs(failures) do
  local condition = conditions[failure.type]
  if condition ~= nil and condition.status == "False" then
    hs.status = "Degraded"
    hs.message = failure.meaning .. " (" .. describe(condition) .. ")"
    return hs
  end
end
local degraded = conditions["Degraded"]
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = "Replicas keep failing (" .. describe(degraded) .. ")"
  return hs
end
local settings = conditions["SettingsValid"]
local ready = conditions["Ready"]
local progressing = conditions["Progressing"]
if ready ~= nil and ready.status == "True" and (progressing == nil or progressing.status ~= "True") then
  hs.status = "Healthy"
  hs.message = ready.message or "All decode pods ready"
  if settings ~= nil and settings.reason == "Rewritten" then
    hs.message = hs.message .. "; settings rewritten: " .. (settings.message or "")
  end
  return hs
end
if progressing ~= nil and progressing.status == "True" then
  hs.message = describe(progressing)
elseif ready ~= nil then
  hs.message = describe(ready)
end
return hs
