; Inno Setup script for Hearth on Windows. UNTESTED: written on Linux, never compiled.
; Build the bundle first on Windows (.venv\Scripts\python packaging\build.py), then:
;   iscc packaging\hearth.iss      -> dist\Hearth-0.1.0-setup.exe
; It installs per user (no admin rights) into %LOCALAPPDATA%\Programs\Hearth.
; User data is not in the install folder (platformdirs: %LOCALAPPDATA%\Hearth),
; so upgrading or uninstalling keeps conversations and settings.
#define AppVersion "0.1.0"

[Setup]
AppId={{6F1C8E52-3C8B-4E0B-9B7A-48E5A1D0C0DE}
AppName=Hearth
AppVersion={#AppVersion}
AppPublisher=Hearth
DefaultDirName={autopf}\Hearth
DefaultGroupName=Hearth
PrivilegesRequired=lowest
OutputDir=..\dist
OutputBaseFilename=Hearth-{#AppVersion}-setup
Compression=lzma2
SolidCompression=yes
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
SetupIconFile=hearth.ico
UninstallDisplayIcon={app}\Hearth.exe

[Files]
Source: "..\dist\Hearth\*"; DestDir: "{app}"; Flags: recursesubdirs createallsubdirs ignoreversion

[Icons]
Name: "{group}\Hearth"; Filename: "{app}\Hearth.exe"
Name: "{autodesktop}\Hearth"; Filename: "{app}\Hearth.exe"; Tasks: desktopicon

[Tasks]
Name: "desktopicon"; Description: "Create a desktop shortcut"; Flags: unchecked

[Run]
Filename: "{app}\Hearth.exe"; Description: "Start Hearth"; Flags: nowait postinstall skipifsilent
