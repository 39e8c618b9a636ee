-- A non-string error object: stof says what it was and exits 1.
error(setmetatable({}, {__tostring = function() return "custom error object" end}))
