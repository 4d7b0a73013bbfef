// Reloads a page that asks for it (data-refresh="SECONDS" on <body>), unless
// the reader is typing in one of its forms.
(function () {
  var seconds = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  if (!(seconds > 0)) {
    return;
  }
  var typing = false;
  document.addEventListener("input", function () { typing = true; });
  window.setInterval(function () {
    if (!typing && document.visibilityState !== "hidden") {
      window.location.reload();
    }
  }, seconds * 1000);
})();
